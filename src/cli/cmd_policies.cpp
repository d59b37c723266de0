// kvsieve policies [NAME] [--markdown|--json]: every KV policy preset and read-time selection with its keys (type,
// range, default, meaning, source), from the declarations the spec parser checks against (policy/params.h).
#include <cstdio>

#include "cli/commands.h"
#include "policy/catalog.h"

namespace kvsieve::cli {

void add_policies(CLI::App& app) {
    auto* cmd = app.add_subcommand("policies", "list the KV policy presets and read-time selections with their keys");
    struct Opts {
        std::string name;
        bool markdown = false, json = false;
    };
    auto o = std::make_shared<Opts>();
    cmd->add_option("name", o->name, "only this preset or selection");
    auto* md = cmd->add_flag("--markdown", o->markdown, "Markdown tables (the README's policy parameter tables)");
    cmd->add_flag("--json", o->json, "JSON")->excludes(md);
    cmd->callback([o] {
        const std::string out = o->markdown ? policies_markdown(o->name)
                                : o->json   ? policies_json(o->name)
                                            : policies_text(o->name);
        std::fwrite(out.data(), 1, out.size(), stdout);
    });
}

}  // namespace kvsieve::cli
