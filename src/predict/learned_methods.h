#pragma once
// The learned KV methods (KVzap, SP-KV, WG-KV, KVpop), one descriptor each, registered in one table
// (predict/learned_methods.cpp). Everything that lists the learned methods reads it: the predictor search path
// (predict/bundled_predictors.h: models/<method>/<name>/), the quantizer's exclusion of predictor tensors
// (predict/predictor_tensors.h), the server's named predictors (policy/predictor_names.h), `kvsieve policies -m`, the
// server's help text and the tests (the preset contract, tests/test_learned_methods.cpp: every method has a trainer, a
// config folder and the quantizer's exclusion).
//
// A predictor folder of a method is <search dir>/<name>/<folder>/ holding config.json (model_type <name>, the trained
// defaults of predict/trained_defaults.h, model_digest) and the weights file; inside a model's GGUF its tensors are
// blk.<layer>.<tensor_prefix>.* (predict/predictor_tensors.h).
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kvsieve {

struct ModelConfig;

/// One learned method.
struct LearnedMethod {
    std::string name;   ///< kvzap: config.json model_type, models/<name>/, `kvsieve train <name>`, configs/<name>/
    std::string title;  ///< as the papers write it: "KVzap"
    std::vector<std::string> presets;  ///< the presets whose model= its predictors fill; the first is the default
    std::string weights_file;          ///< the weights inside a predictor folder ("model.safetensors")
    std::string tensor_prefix;         ///< <method> of blk.<layer>.<method>.* in a GGUF: kept as they are by quantize
    std::string trained_keys;          ///< the trained defaults its predictors record ("tau, window and sinks")
    std::string trainer;               ///< the kvsieve-train subcommand that trains one
    std::string config_dir;            ///< the folder of its training configs, relative to the repository root
    std::string smollm2_config;        ///< the config in config_dir that trained the shipped SmolLM2 predictor
    /// The config key naming the folder its trainer writes the predictor to (`kvsieve train <name> -m MODEL` sets it
    /// to the user's predictor folder): "output" (WG-KV, KVpop), "predictor" (SP-KV), "out" (KVzap).
    std::string predictor_key;
    /// True when a bare weights file, or a folder without config.json, is taken as this method's (WG-KV gates as
    /// tools/convert_wgkv.py writes them).
    bool bare_weights = false;
    /// The preset a predictor folder's parsed config.json fills (null: presets[0]). KVpop: kind "mlp" → kvpop_mlp.
    std::string (*preset_of)(const nlohmann::json& config) = nullptr;
    /// The spec that builds a policy from the predictor at `path` for checking it against model `c` (the server's
    /// check at start). Null: "<preset>:model=<path>" with the preset from preset_of. KVpop also asks its tensors
    /// for the kind and sets the capacity s + w + 1 its config.json implies.
    std::string (*check_spec)(const std::string& path, const ModelConfig& c) = nullptr;

    /// The preset of a predictor whose config.json is `config` (preset_of, else presets[0]).
    std::string preset_for(const nlohmann::json& config) const;
    /// check_spec(path, c), or the default spec.
    std::string spec_for_check(const std::string& path, const ModelConfig& c) const;
};

/// Every learned method, in registration order (kvzap, spkv, wgkv, kvpop).
const std::vector<LearnedMethod>& learned_methods();

/// The method named `name` (config.json model_type, folder under models/), or null.
const LearnedMethod* find_learned_method(const std::string& name);

/// The method whose predictors fill `preset`'s model= (kvpop_mlp → kvpop), or null for a preset of no learned method.
const LearnedMethod* learned_method_of_preset(const std::string& preset);

/// "kvzap, spkv, wgkv or kvpop" (for messages and help texts).
std::string learned_method_names_text();

/// Every preset a learned predictor fills, in method order ("kvzap", "spkv", "wgkv", "kvpop", "kvpop_mlp").
std::vector<std::string> learned_presets();

}  // namespace kvsieve
