#pragma once
// The trained defaults of a learned predictor: the inference settings its training chose (the window and sinks the
// targets were computed for, the threshold τ it was trained or calibrated at, the KVpop budget and readout), and
// where it came from. Every learned method (KVzap, SP-KV, WG-KV, KVpop) stores them in one metadata block:
//   config.json beside the weights (a predictor folder)       {"tau": −4, "window": 128, "sinks": 0, …}
//   the model's GGUF (SP-KV gates trained into the model,     kvsieve.predictor.<method>.{tau,window,sinks,…}
//   predict/predictor_tensors.h)
// read by read_trained_defaults() and carried by the loaded predictor. A preset fills the keys its spec left out from
// them: spec > trained defaults > preset defaults (policy/learned_rule.h, docs/architecture.md "Learned predictors").
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace kvsieve {

class GGUFFile;

/// One predictor's trained defaults; a field is empty when the predictor does not record it.
struct TrainedDefaults {
    std::optional<double> tau;      ///< τ of the threshold rule (KVzap: log score; SP-KV, WG-KV: gate value)
    std::optional<int64_t> window;  ///< w: the local window the predictor was trained for (tokens, ≥ 0)
    std::optional<int64_t> sinks;   ///< s: sink tokens always kept (≥ 0)
    std::optional<int64_t> budget;  ///< k: long-range entries per KV head of the training (KVpop `budget_k`), ≥ 1
    std::optional<bool> delayed;    ///< KVpop: mLSTM read when the entry leaves the window (true) or at write
    std::optional<int64_t>
        capacity;              ///< KVpop: the operating point B = s + w + k its card reports (entries per KV head)
    std::string model_digest;  ///< io/model_digest.h of the model it was trained for (empty: not recorded)
    std::string base_model;    ///< the model it was trained on, as the trainer named it (empty: not recorded)
    std::string provenance;    ///< the command or config that made it (empty: not recorded)
    std::string source;        ///< the file the block was read from (config.json or GGUF); empty: none

    /// True when no inference setting is recorded (tau, window, sinks, budget and delayed all empty).
    bool empty() const { return !tau && !window && !sinks && !budget && !delayed && !capacity; }
};

/// The trained defaults of the predictor at `path`:
///   a directory                DIR/config.json (none there: an empty block)
///   a .gguf file               its metadata kvsieve.predictor.<method>.* (read_trained_defaults(GGUFFile, method))
///   any other file             an empty block (e.g. a bare .safetensors of WG-KV gates)
/// Throws Error naming the file for a config.json that is not JSON or a GGUF that cannot be read, and naming the file
/// and the key for a value of the wrong type or range (trained_defaults_from_json).
TrainedDefaults read_trained_defaults(const std::string& path, const std::string& method);

/// The block from GGUF metadata kvsieve.predictor.<method>.{tau (f32), window, sinks, budget (u32), delayed (bool),
/// base_model, provenance (string)}. Throws Error naming the file and the key for a value of the wrong type.
TrainedDefaults read_trained_defaults(const GGUFFile& f, const std::string& method);

/// The block from a parsed config.json object (`source` names the file in errors). Keys: "tau" (number), "window",
/// "sinks" (integers ≥ 0), "budget_k", "capacity" (integers ≥ 1), "delayed" (boolean), "base_model", "provenance",
/// "model_digest" (strings); other
/// keys are the method's own and are ignored. Throws Error "'<source>': key '<key>' must be …, got <value>" for a key
/// of the wrong type or range, or when `j` is not an object.
TrainedDefaults trained_defaults_from_json(const nlohmann::json& j, const std::string& source);

/// Writes the recorded fields of `d` into the config.json object `j` under the keys trained_defaults_from_json reads
/// (empty fields are left out; `source` is not written).
void write_trained_defaults(const TrainedDefaults& d, nlohmann::json& j);

}  // namespace kvsieve
