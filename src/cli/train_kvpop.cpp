// kvsieve train kvpop: KVpop's eviction scorer trained on a frozen model's future attention (docs/training.md;
// libtorch stack).
#include "cli/trainers.h"
#ifdef KVSIEVE_HAVE_TRAIN
#include "train/kvpop.h"
#endif

namespace kvsieve::cli {

TrainerSpec kvpop_trainer() {
#ifdef KVSIEVE_HAVE_TRAIN
    constexpr auto run = &train::run_kvpop;
#else
    constexpr bool (*run)(const std::string&, bool, bool) = nullptr;
#endif
    return config_trainer("kvpop",
                          "KVpop: train a fixed-budget eviction scorer (mLSTM or MLP) on the frozen model's future "
                          "attention (docs/training.md)",
                          run);
}

KVSIEVE_TRAINER(kvpop_trainer);

}  // namespace kvsieve::cli
