// kvsieve train pretrain: pretrain a Llama-family model from a JSON config (docs/training.md; libtorch stack).
#include "cli/trainers.h"
#ifdef KVSIEVE_HAVE_TRAIN
#include "train/pretrain.h"
#endif

namespace kvsieve::cli {

TrainerSpec pretrain_trainer() {
#ifdef KVSIEVE_HAVE_TRAIN
    constexpr auto run = &train::run_pretrain;
#else
    constexpr bool (*run)(const std::string&, bool, bool) = nullptr;
#endif
    return config_trainer("pretrain", "pretrain a Llama-family model from a JSON config (docs/training.md)", run);
}

KVSIEVE_TRAINER(pretrain_trainer);

}  // namespace kvsieve::cli
