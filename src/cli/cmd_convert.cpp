// kvsieve convert --llama2c MODEL.bin --tokenizer TOK.bin -o OUT.gguf
#include <cstdio>

#include "cli/commands.h"
#include "model/llama2c.h"

namespace kvsieve::cli {

void add_convert(CLI::App& app) {
    auto* cmd = app.add_subcommand("convert", "convert a llama2.c checkpoint and tokenizer to GGUF");
    struct Opts {
        std::string ckpt, tok, out;
    };
    auto o = std::make_shared<Opts>();
    cmd->add_option("--llama2c", o->ckpt, "llama2.c checkpoint (.bin)")->required()->check(CLI::ExistingFile);
    cmd->add_option("--tokenizer", o->tok, "llama2.c tokenizer (.bin)")->required()->check(CLI::ExistingFile);
    cmd->add_option("-o,--output", o->out, "GGUF file to write")->required();
    cmd->callback([o] {
        convert_llama2c(o->ckpt, o->tok, o->out);
        std::fprintf(stderr, "wrote %s\n", o->out.c_str());
    });
}

}  // namespace kvsieve::cli
