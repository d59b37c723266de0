#pragma once
// The JSON config of `kvsieve train kvzap` (docs/training.md), read like the other trainers' configs: every key checked,
// relative paths taken from the config's folder. Each key is also a command-line flag (cli/train_kvzap.cpp):
//   {"model": "models/stories260K.gguf",            --model       GGUF model the pairs come from
//    "corpus": ["a.txt", "b.txt"],                  --corpus      text files prompts are cut from
//    "out": "tests/data/models/kvzap/stories260K-linear",      --out         checkpoint directory
//    "mlp": false, "epochs": 15,                    --mlp, --epochs   the MLP surrogate (libtorch stack)
//    "prompts": 40, "min_tokens": 750, "max_tokens": 1250, "tokens_per_prompt": 500, "ridge": 1e-3, "seed": 0,
//    "threads": 0,
//    "tau": -4, "window": 128, "sinks": 0}          --tau, --window, --sinks   trained defaults written to
//                                                                    the checkpoint's config.json
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "fit/kvzap_fit.h"

namespace kvsieve {

/// A parsed `train kvzap` config.
struct KVzapTrainConfig {
    std::string model, out;           ///< resolved paths
    std::vector<std::string> corpus;  ///< resolved paths, at least one
    bool mlp = false;                 ///< the MLP surrogate D → D/8 → H_kv (needs the libtorch training stack)
    int epochs = 15;                  ///< MLP epochs
    int threads = 0;                  ///< 0: all cores
    KVzapFitOptions fit;              ///< pair collection and ridge options, and the trained defaults to record
};

/// The keys a `train kvzap` config may hold.
const std::vector<std::string>& kvzap_train_config_keys();

/// Reads `j` (relative paths from `base`, a folder; "" for the working directory). Throws Error naming the key for
/// an unknown key, a missing model/corpus/out, a value of the wrong type or range (ridge < 0, counts < 1, window
/// or sinks < 0), or a model file that does not exist.
KVzapTrainConfig read_kvzap_train_config(const nlohmann::json& j, const std::string& base);

}  // namespace kvsieve
