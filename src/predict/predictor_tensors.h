#pragma once
// Learned predictors stored inside a model's GGUF: the schema the trainers write (train/mirror.h, save_mirror)
// and the scorers read.
//   tensors   blk.<layer>.<method>.<name>   F32, GGUF order (ne[0] fastest: a Linear weight [out, in] is
//                                           ne = {in, out}), e.g. blk.3.spkv.fc1.weight
//   metadata  kvsieve.predictor.<method>.<key>   the method's hyperparameters (e.g. kvsieve.predictor.spkv.hidden)
// The engine's forward ignores these tensors, so a model with predictors still runs as a plain model.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvsieve {

class GGUFFile;

/// "blk.<layer>.<method>.<name>". Throws Error if method or name is empty or method contains a dot.
std::string predictor_tensor_name(const std::string& method, int layer, const std::string& name);
/// True for a tensor named blk.<layer>.<method>.<…> with <method> the tensor prefix of a registered learned method
/// (predict/learned_methods.h): the quantizer keeps such tensors as they are (small, and read as F32).
bool is_predictor_tensor(const std::string& name);

/// "kvsieve.predictor.<method>.<key>".
std::string predictor_metadata_key(const std::string& method, const std::string& key);

/// One predictor tensor as float32: shape outermost first ([out, in] for a Linear weight), data row-major.
struct PredictorTensor {
    std::vector<int64_t> shape;
    std::vector<float> data;
};

/// Every tensor blk.<layer>.<method>.* of `f`, keyed by <name>. Throws Error if one is not F32. Empty if none.
std::map<std::string, PredictorTensor> read_predictor_tensors(const GGUFFile& f, const std::string& method, int layer);

}  // namespace kvsieve
