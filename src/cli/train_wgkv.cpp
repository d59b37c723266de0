// kvsieve train wgkv: WG-KV write gates distilled from a frozen model (docs/training.md; libtorch stack).
#include "cli/trainers.h"
#ifdef KVSIEVE_HAVE_TRAIN
#include "train/wgkv.h"
#endif

namespace kvsieve::cli {

TrainerSpec wgkv_trainer() {
#ifdef KVSIEVE_HAVE_TRAIN
    constexpr auto run = &train::run_wgkv;
#else
    constexpr bool (*run)(const std::string&, bool, bool) = nullptr;
#endif
    return config_trainer(
        "wgkv", "WG-KV: distil write gates on pre/post-RoPE keys from a frozen model (docs/training.md)", run);
}

KVSIEVE_TRAINER(wgkv_trainer);

}  // namespace kvsieve::cli
