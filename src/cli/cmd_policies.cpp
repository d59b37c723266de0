// kvsieve policies [NAME] [--markdown|--json] [-m MODEL]: every KV policy preset and read-time selection with its keys
// (type, range, default, meaning, source), from the declarations the spec parser checks against (policy/params.h);
// with -m, then which learned presets are ready for that model: the predictors trained for it that a spec without
// model= takes (predict/bundled_predictors.h).
#include <cstdio>

#include "cli/commands.h"
#include "policy/catalog.h"
#include "predict/bundled_predictors.h"
#include "predict/learned_methods.h"

namespace kvsieve::cli {

void add_policies(CLI::App& app) {
    auto* cmd = app.add_subcommand("policies", "list the KV policy presets and read-time selections with their keys");
    struct Opts {
        std::string name, model;
        bool markdown = false, json = false;
    };
    auto o = std::make_shared<Opts>();
    cmd->add_option("name", o->name, "only this preset or selection");
    auto* md = cmd->add_flag("--markdown", o->markdown, "Markdown tables (docs/policies.md's policy parameter tables)");
    auto* js = cmd->add_flag("--json", o->json, "JSON")->excludes(md);
    cmd->add_option("-m,--model", o->model, "also list the learned presets ready for this GGUF model (its predictors)")
        ->check(CLI::ExistingFile)
        ->excludes(md)
        ->excludes(js);
    cmd->callback([o] {
        const std::string out = o->markdown ? policies_markdown(o->name)
                                : o->json   ? policies_json(o->name)
                                            : policies_text(o->name);
        std::fwrite(out.data(), 1, out.size(), stdout);
        if (o->model.empty()) return;
        select_predictor_model(o->model);
        std::printf("\nlearned presets ready for %s (%s):\n", o->model.c_str(), selected_model_digest().c_str());
        const auto ready = ready_predictors();
        for (const std::string& preset : learned_presets()) {
            std::string names;
            for (const BundledPredictor& p : ready)
                if (p.preset == preset)
                    names += (names.empty() ? "" : ", ") + p.name + (p.is_default ? " (default)" : "") + "  " + p.path;
            if (names.empty())
                names = "none: give model=<folder> or train one: kvsieve train " +
                        learned_method_of_preset(preset)->trainer + " -m " + o->model;
            std::printf("  %-10s %s\n", preset.c_str(), names.c_str());
        }
    });
}

}  // namespace kvsieve::cli
