#pragma once
// safetensors files: u64 little-endian header length N, an N-byte JSON header mapping tensor names to
// {dtype, shape, data_offsets: [begin, end]} (offsets relative to the data after the header), then raw data.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvsieve {

/// One tensor of a safetensors file, converted to float32.
struct SafeTensor {
    std::string dtype;           ///< "F32", "F16" or "BF16"
    std::vector<int64_t> shape;  ///< row-major
    std::vector<float> data;
};

/// Reads every tensor of a safetensors file. Throws Error naming the problem for a missing or truncated
/// file, a header that is not JSON, an unsupported dtype, or offsets / sizes that do not match the shape or
/// lie outside the file.
std::map<std::string, SafeTensor> read_safetensors(const std::string& path);

/// The file of a checkpoint given as a safetensors file or as a directory holding model.safetensors.
std::string safetensors_file(const std::string& path);

/// The data of tensor `name` of `t`, which must have `shape`. Throws Error "<what>: tensor NAME is missing" or
/// "<what>: tensor NAME has shape [..], expected [..] for this model" (`what` names the checkpoint).
const std::vector<float>& shaped_tensor(const std::map<std::string, SafeTensor>& t, const std::string& name,
                                        const std::vector<int64_t>& shape, const std::string& what);

/// Writes each tensor as its dtype says, F32 (also when empty) or F16 (rounded to nearest); data must hold the
/// product of the shape values. Throws Error for another dtype or on I/O failure.
void write_safetensors(const std::string& path, const std::map<std::string, SafeTensor>& tensors);

}  // namespace kvsieve
