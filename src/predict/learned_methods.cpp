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

/// A method whose folder, trainer, tensor prefix and config folder are its name (models/<name>/, `kvsieve train
/// <name>`, blk.<l>.<name>.*, configs/<name>/), its weights in model.safetensors.
LearnedMethod method(std::string name, std::string title, std::vector<std::string> presets, std::string trained_keys,
                     std::string smollm2_config, std::string predictor_key) {
    LearnedMethod m;
    m.name = name;
    m.title = std::move(title);
    m.presets = std::move(presets);
    m.weights_file = "model.safetensors";
    m.tensor_prefix = name;
    m.trained_keys = std::move(trained_keys);
    m.trainer = name;
    m.config_dir = "configs/" + name;
    m.smollm2_config = std::move(smollm2_config);
    m.predictor_key = std::move(predictor_key);
    return m;
}
}  // namespace

/// The registrations: one per learned method (CONTRIBUTING.md, "adding a learned method").
const std::vector<LearnedMethod>& learned_methods() {
    static const std::vector<LearnedMethod> methods = [] {
        std::vector<LearnedMethod> v;
        v.push_back(method("kvzap", "KVzap", {"kvzap"}, "tau, window and sinks", "smollm2-kvzap-mlp.json", "out"));
        v.push_back(
            method("spkv", "SP-KV", {"spkv"}, "tau, window and sinks", "smollm2-spkv-frozen.json", "predictor"));
        LearnedMethod wgkv = method("wgkv", "WG-KV", {"wgkv"}, "tau, window and sinks", "smollm2-wgkv.json", "output");
        wgkv.bare_weights = true;
        v.push_back(wgkv);
        LearnedMethod kvpop = method("kvpop", "KVpop", {"kvpop", "kvpop_mlp"}, "sinks, window and delayed",
                                     "smollm2-kvpop-mlstm.json", "output");
        kvpop.preset_of = &kvpop_preset_of;
        kvpop.check_spec = &kvpop_check_spec;
        v.push_back(kvpop);
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
