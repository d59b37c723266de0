// kvsieve synth SHAPE -o OUT.gguf [--type f16|q8_0|...] [--seed N]
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "kernels/parallel.h"
#include "model/synth.h"

namespace kvsieve::cli {

void add_synth(CLI::App& app) {
    std::string names;
    for (const auto& s : synth_shapes()) names += (names.empty() ? "" : ", ") + s.name;
    auto* cmd = app.add_subcommand("synth", "write a random-weight GGUF of a named shape (" + names + ")");
    struct Opts {
        std::string shape, out, type = "f16";
        uint64_t seed = 1;
        int threads = 0;
    };
    auto o = std::make_shared<Opts>();
    cmd->add_option("shape", o->shape, "model shape: " + names)->required();
    cmd->add_option("-o,--output", o->out, "GGUF file to write")->required();
    cmd->add_option("--type", o->type, "weight type: f32, f16, bf16, q8_0, q4_0")->capture_default_str();
    cmd->add_option("--seed", o->seed, "random seed")->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "threads (0: all cores)");
    cmd->callback([o] {
        set_num_threads(o->threads);
        const SynthShape& s = synth_shape(o->shape);
        const TensorType t = parse_type(o->type);
        const auto t0 = std::chrono::steady_clock::now();
        write_synth_model(o->out, s, t, o->seed);
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "wrote %s (%s, %s) in %.1f s\n", o->out.c_str(), s.name.c_str(), type_name(t).c_str(),
                     sec);
    });
}

}  // namespace kvsieve::cli
