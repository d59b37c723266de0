#pragma once
// Element types of weight tensors as numbered by GGUF/ggml, with their block geometry.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvsieve {

/// ggml type ids as stored in GGUF tensor infos. The listed weight types can be computed with (is_supported_type);
/// any other id read from a file is reported by name (or number) as unsupported.
enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,  ///< activations only (dot products with Q4_1 / Q5_1 weights), never a weight type here
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,    ///< activations only (dot products with Q2_K / Q3_K / Q5_K weights), never a weight type here
    IQ4_NL = 20,  ///< KV cache rows only (kernels/kv_types.h), never a weight type here
    BF16 = 30,
};

/// Weights per block: 1 for float types, 32 for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, 256 for the K-quants.
int64_t block_size(TensorType t);
/// Bytes per block: 4 (F32), 2 (F16, BF16), 18 (Q4_0), 20 (Q4_1), 22 (Q5_0), 24 (Q5_1), 34 (Q8_0), 84 (Q2_K),
/// 110 (Q3_K), 144 (Q4_K), 176 (Q5_K), 210 (Q6_K), 292 (Q8_K).
size_t block_bytes(TensorType t);
/// Bytes of one row of n elements; throws Error if n is not a multiple of the block size.
size_t row_bytes(TensorType t, int64_t n);
/// True if kvsieve can compute with this ggml type id.
bool is_supported_type(uint32_t ggml_type);
/// Human-readable name of a ggml type id ("Q4_K", "IQ2_XS", or "type 123" if unknown).
std::string type_name(uint32_t ggml_type);
inline std::string type_name(TensorType t) { return type_name(static_cast<uint32_t>(t)); }
/// Parses "f32", "F16", "q8_0"... into a supported type; throws Error naming the bad value.
TensorType parse_type(const std::string& name);
/// Block size and bytes of any ggml type id, supported or not (for checking sizes of every tensor in a
/// file); returns false for ids unknown to ggml.
bool ggml_type_geometry(uint32_t ggml_type, int64_t* blck, size_t* bytes);

}  // namespace kvsieve
