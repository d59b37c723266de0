#include "predict/spkv_export.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "io/model_config.h"
#include "io/model_digest.h"
#include "io/safetensors.h"
#include "predict/predictor_tensors.h"
#include "predict/spkv_gates.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace kvsieve {

void export_spkv_gates(const std::string& trained_gguf, const std::string& out_dir, const SpkvExportOptions& o) {
    const GGUFFile trained(trained_gguf);
    const ModelConfig c = ModelConfig::from_gguf(trained);
    // Every tensor's shape checked against the model, and the trained defaults read, as a policy loads them.
    const SpkvGates gates = SpkvGates::load(trained, c.n_layer, c.n_embd, c.n_head_kv);
    std::string digest, base = o.base_model;
    if (base.empty()) {
        base = trained_gguf;
        digest = model_digest(trained);
    } else {
        const GGUFFile b(base);
        const ModelConfig bc = ModelConfig::from_gguf(b);
        require(bc.n_layer == c.n_layer && bc.n_embd == c.n_embd && bc.n_head_kv == c.n_head_kv, "base model '", base,
                "' (", bc.summary(), ") is not the shape of the model the gates of '", trained_gguf,
                "' were trained on (", c.summary(), ")");
        digest = model_digest(b);
    }

    std::map<std::string, SafeTensor> tensors;
    for (int l = 0; l < c.n_layer; ++l)
        for (auto& [name, t] : read_predictor_tensors(trained, "spkv", l))
            tensors[predictor_tensor_name("spkv", l, name)] = SafeTensor{o.f16 ? "F16" : "F32", t.shape, t.data};

    TrainedDefaults d = gates.trained_defaults();
    d.model_digest = digest;
    d.base_model = base;
    if (!o.provenance.empty()) d.provenance = o.provenance;
    nlohmann::json j = {{"model_type", "spkv"},
                        {"mode", trained.get_string(predictor_metadata_key("spkv", "mode"), "")},
                        {"hidden", gates.hidden()},
                        {"n_layer", c.n_layer},
                        {"n_embd", c.n_embd},
                        {"n_head_kv", c.n_head_kv},
                        {"dtype", o.f16 ? "F16" : "F32"}};
    write_trained_defaults(d, j);
    if (o.is_default) j["default"] = true;

    std::filesystem::create_directories(out_dir);
    write_safetensors((std::filesystem::path(out_dir) / "model.safetensors").string(), tensors);
    write_file_atomic((std::filesystem::path(out_dir) / "config.json").string(), j.dump(2) + "\n");
}

}  // namespace kvsieve
