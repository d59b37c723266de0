// kvsieve tokenize -m MODEL -p TEXT [--no-bos] [--parse-special]: prints the ids on one line.
#include <cstdio>

#include "cli/commands.h"
#include "io/gguf.h"
#include "text/tokenizer.h"

namespace kvsieve::cli {

void add_tokenize(CLI::App& app) {
    auto* cmd = app.add_subcommand("tokenize", "print the token ids of a text, space-separated on one line");
    struct Opts {
        std::string model, prompt;
        bool no_bos = false, parse_special = false;
    };
    auto o = std::make_shared<Opts>();
    cmd->add_option("-m,--model", o->model, "GGUF file (only its vocabulary is read)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("-p,--prompt", o->prompt, "text to tokenize")->required();
    cmd->add_flag("--no-bos", o->no_bos, "do not add BOS/EOS");
    cmd->add_flag("--parse-special", o->parse_special, "turn text of control tokens into those tokens");
    cmd->callback([o] {
        GGUFFile f(o->model);
        const auto tok = Tokenizer::from_gguf(f);
        const auto ids = tok->encode(o->prompt, !o->no_bos, o->parse_special);
        std::string line;
        for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
        std::printf("%s\n", line.c_str());
    });
}

}  // namespace kvsieve::cli
