#include "predict/predictor_tensors.h"

#include <cstring>

#include "io/gguf.h"
#include "kernels/tensor_types.h"
#include "predict/learned_methods.h"
#include "util/error.h"

namespace kvsieve {

std::string predictor_tensor_name(const std::string& method, int layer, const std::string& name) {
    require(!method.empty() && method.find('.') == std::string::npos, "predictor method '", method,
            "' must be a non-empty name without dots");
    require(!name.empty(), "predictor tensor of ", method, " needs a name");
    require(layer >= 0, "predictor tensor ", method, ".", name, ": layer ", layer, " is negative");
    return "blk." + std::to_string(layer) + "." + method + "." + name;
}

bool is_predictor_tensor(const std::string& name) {
    if (name.compare(0, 4, "blk.") != 0) return false;
    const size_t a = name.find('.', 4);
    if (a == std::string::npos) return false;
    const size_t b = name.find('.', a + 1);
    if (b == std::string::npos) return false;
    const std::string method = name.substr(a + 1, b - a - 1);
    for (const LearnedMethod& m : learned_methods())
        if (method == m.tensor_prefix) return true;
    return false;
}

std::string predictor_metadata_key(const std::string& method, const std::string& key) {
    return "kvsieve.predictor." + method + "." + key;
}

std::map<std::string, PredictorTensor> read_predictor_tensors(const GGUFFile& f, const std::string& method, int layer) {
    const std::string prefix = "blk." + std::to_string(layer) + "." + method + ".";
    std::map<std::string, PredictorTensor> out;
    for (const GGUFTensorInfo& t : f.tensors()) {
        if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
        require(t.type == static_cast<uint32_t>(TensorType::F32), "predictor tensor '", t.name, "' in '", f.path(),
                "' is not F32");
        PredictorTensor p;
        for (int i = static_cast<int>(t.n_dims) - 1; i >= 0; --i) p.shape.push_back(t.ne[i]);
        p.data.resize(static_cast<size_t>(t.n_elements()));
        std::memcpy(p.data.data(), t.data, p.data.size() * sizeof(float));
        out[t.name.substr(prefix.size())] = std::move(p);
    }
    return out;
}

}  // namespace kvsieve
