// kvsieve train spkv: SP-KV continued pretraining, the model and its utility gates trained together (docs/training.md;
// libtorch stack).
#include "cli/trainers.h"
#ifdef KVSIEVE_HAVE_TRAIN
#include "train/spkv.h"
#endif

namespace kvsieve::cli {

TrainerSpec spkv_trainer() {
#ifdef KVSIEVE_HAVE_TRAIN
    constexpr auto run = &train::run_spkv;
    constexpr auto evaluate = &train::evaluate_spkv;
#else
    constexpr bool (*run)(const std::string&, bool, bool) = nullptr;
    constexpr void (*evaluate)(const std::string&, bool) = nullptr;
#endif
    return config_trainer(
        "spkv", "SP-KV: train a model and its KV utility gates together by next-token loss (docs/training.md)", run,
        evaluate, true);
}

}  // namespace kvsieve::cli
