// kvsieve: the command-line tool. Errors print one line "error: ..." and exit with status 1.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "kernels/blas_core.h"
#include "util/error.h"

int main(int argc, char** argv) {
    kvsieve::ensure_blas_core(argv);  // before any thread: OpenBLAS reads its kernel choice when it loads
    CLI::App app{"kvsieve: LLM inference with a KV cache that keeps only what future tokens use"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "kvsieve 0.1.0");
    kvsieve::cli::add_generate(app);
    kvsieve::cli::add_chat(app);
    kvsieve::cli::add_serve(app);
    kvsieve::cli::add_pull(app);
    kvsieve::cli::add_policies(app);
    kvsieve::cli::add_tokenize(app);
    kvsieve::cli::add_convert(app);
    kvsieve::cli::add_bench(app);
    kvsieve::cli::add_synth(app);
    kvsieve::cli::add_inspect(app);
    kvsieve::cli::add_quantize(app);
    kvsieve::cli::add_eval(app);
    kvsieve::cli::add_eval_tasks(app);
    kvsieve::cli::add_train(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) { return app.exit(e); } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
