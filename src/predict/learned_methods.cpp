#include "predict/learned_methods.h"

#include <nlohmann/json.hpp>

#include "io/model_config.h"
#include "predict/kvpop_scorer.h"

namespace kvsieve {

namespace {
/// KVpop's config.json kind: "mlp" is KVpop_mlp, anything else (or none) the mLSTM scorer.
std::string kvpop_preset_of(const nlohmann::json& j) {
    return j.value("kind", std::string("mlstm")) == "mlp" ? "kvpop_mlp" : "kvpop";
}

/// KVpop: the kind from config.json or, when it is not recorded, from the tensors; the capacity of the smallest cache
/// its window and sinks allow (s + w + 1), so the check runs without a budget in the spec.
std::string kvpop_check_spec(const std::string& path, const ModelConfig& c) {
    const KvpopConfig k = read_kvpop_config(path);
    std::string preset = k.kind == "mlp" ? "kvpop_mlp" : "kvpop";
    if (k.kind.empty())
        preset = KvpopScorerNet::load(path, c.n_layer, c.n_head_kv, c.head_dim).stateful() ? "kvpop" : "kvpop_mlp";
    return preset + ":model=" + path + ",capacity=" + std::to_string(k.sinks + k.window + 1);
}
}  // namespace

/// The registrations: one per learned method (CONTRIBUTING.md, "adding a learned method").
const std::vector<LearnedMethod>& learned_methods() {
    static const std::vector<LearnedMethod> methods = [] {
        std::vector<LearnedMethod> v;
        {
            LearnedMethod m;
            m.name = "kvzap";
            m.title = "KVzap";
            m.presets = {"kvzap"};
            m.weights_file = "model.safetensors";
            m.tensor_prefix = "kvzap";
            m.trained_keys = "tau, window and sinks";
            m.trainer = "kvzap";
            m.config_dir = "configs/kvzap";
            m.smollm2_config = "smollm2-kvzap-mlp.json";
            v.push_back(m);
        }
        {
            LearnedMethod m;
            m.name = "spkv";
            m.title = "SP-KV";
            m.presets = {"spkv"};
            m.weights_file = "model.safetensors";
            m.tensor_prefix = "spkv";
            m.trained_keys = "tau, window and sinks";
            m.trainer = "spkv";
            m.config_dir = "configs/spkv";
            m.smollm2_config = "smollm2-spkv-frozen.json";
            v.push_back(m);
        }
        {
            LearnedMethod m;
            m.name = "wgkv";
            m.title = "WG-KV";
            m.presets = {"wgkv"};
            m.weights_file = "model.safetensors";
            m.tensor_prefix = "wgkv";
            m.trained_keys = "tau, window and sinks";
            m.trainer = "wgkv";
            m.config_dir = "configs/wgkv";
            m.smollm2_config = "smollm2-wgkv.json";
            m.bare_weights = true;
            v.push_back(m);
        }
        {
            LearnedMethod m;
            m.name = "kvpop";
            m.title = "KVpop";
            m.presets = {"kvpop", "kvpop_mlp"};
            m.weights_file = "model.safetensors";
            m.tensor_prefix = "kvpop";
            m.trained_keys = "sinks, window and delayed";
            m.trainer = "kvpop";
            m.config_dir = "configs/kvpop";
            m.smollm2_config = "smollm2-kvpop-mlstm.json";
            m.preset_of = &kvpop_preset_of;
            m.check_spec = &kvpop_check_spec;
            v.push_back(m);
        }
        return v;
    }();
    return methods;
}

std::string LearnedMethod::preset_for(const nlohmann::json& config) const {
    return preset_of ? preset_of(config) : presets.front();
}

std::string LearnedMethod::spec_for_check(const std::string& path, const ModelConfig& c) const {
    if (check_spec) return check_spec(path, c);
    return presets.front() + ":model=" + path;
}

const LearnedMethod* find_learned_method(const std::string& name) {
    for (const LearnedMethod& m : learned_methods())
        if (m.name == name) return &m;
    return nullptr;
}

const LearnedMethod* learned_method_of_preset(const std::string& preset) {
    for (const LearnedMethod& m : learned_methods())
        for (const std::string& p : m.presets)
            if (p == preset) return &m;
    return nullptr;
}

std::string learned_method_names_text() {
    const auto& v = learned_methods();
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + v[i].name;
    return s;
}

std::vector<std::string> learned_presets() {
    std::vector<std::string> out;
    for (const LearnedMethod& m : learned_methods()) out.insert(out.end(), m.presets.begin(), m.presets.end());
    return out;
}

}  // namespace kvsieve
