// kvsieve quantize IN.gguf OUT.gguf --type TYPE (every type kernels/quant.h can write)
#include <cstdio>

#include "cli/commands.h"
#include "kernels/parallel.h"
#include "kernels/quant.h"
#include "model/quantize.h"
#include "util/error.h"

namespace kvsieve::cli {

void add_quantize(CLI::App& app) {
    auto* cmd = app.add_subcommand("quantize", "convert the weight matrices of a GGUF model to another type");
    struct Opts {
        std::string in, out, type;
        int threads = 0;
    };
    auto o = std::make_shared<Opts>();
    cmd->add_option("input", o->in, "GGUF model")->required()->check(CLI::ExistingFile);
    cmd->add_option("output", o->out, "GGUF file to write")->required();
    cmd->add_option("--type", o->type, "weight type: " + quantize_type_names())->required();
    cmd->add_option("-t,--threads", o->threads, "threads (0: all cores)");
    cmd->callback([o] {
        set_num_threads(o->threads);
        TensorType t{};
        try {
            t = parse_type(o->type);
        } catch (const Error&) {
            fail("--type '", o->type, "' is not a type quantize writes (", quantize_type_names(), ")");
        }
        quantize_model(o->in, o->out, t);
        std::fprintf(stderr, "wrote %s\n", o->out.c_str());
    });
}

}  // namespace kvsieve::cli
