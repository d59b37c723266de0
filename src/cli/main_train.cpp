// kvsieve-train: the trainers of the learned KV policies (cli/trainers.h), apart from the inference binary so that
// only training loads libtorch. `kvsieve train NAME ...` runs this binary. Errors print one line "error: ..." and
// exit with status 1.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "kernels/blas_core.h"
#include "util/error.h"

int main(int argc, char** argv) {
    kvsieve::ensure_blas_core(argv);  // before any thread: OpenBLAS reads its kernel choice when it loads
    CLI::App app{"kvsieve-train: fit the learned KV policies of kvsieve (KVzap, SP-KV, WG-KV, KVpop)"};
    app.set_version_flag("--version", "kvsieve-train 0.1.0");
    kvsieve::cli::add_trainers(app);
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
