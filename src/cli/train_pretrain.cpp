// kvsieve train pretrain: pretrain a Llama-family model from a JSON config (docs/training.md; libtorch stack).
#include "cli/trainers.h"
#include "util/error.h"
#ifdef KVSIEVE_HAVE_TRAIN
#include "train/pretrain.h"
#endif

namespace kvsieve::cli {

TrainerSpec pretrain_trainer() {
    TrainerSpec s;
    s.name = "pretrain";
    s.help = "pretrain a Llama-family model from a JSON config (docs/training.md)";
    s.setup = [](CLI::App& pt) {
        auto po = std::make_shared<std::pair<std::string, bool>>();
        auto quiet = std::make_shared<bool>(false);
        pt.add_option("--config", po->first, "JSON config")->required()->check(CLI::ExistingFile);
        pt.add_flag("--resume", po->second, "continue from the run directory's checkpoint");
        pt.add_flag("-q,--quiet", *quiet, "no progress output");
        pt.callback([po, quiet] {
#ifdef KVSIEVE_HAVE_TRAIN
            // Interrupted (SIGINT/SIGTERM, checkpoint saved): exit 130 so scripts chaining runs stop here.
            if (!train::run_pretrain(po->first, po->second, !*quiet)) throw CLI::RuntimeError(130);
#else
            fail("train pretrain needs the libtorch training stack, which this build does not include (install "
                 "libtorch-dev and rebuild)");
#endif
        });
    };
    return s;
}

}  // namespace kvsieve::cli
