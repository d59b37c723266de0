#pragma once
// The element types of cached keys and values, one row of a table each (kv_types.cpp): name, block geometry, row
// conversions and the decode-attention kernels per instruction set. Every question about a KV element type is a
// lookup in that table; adding a type is adding a row (CONTRIBUTING.md lists the files it touches).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kernels/tensor_types.h"

namespace kvsieve {

struct DotKernels;

/// Element type of cached keys or values; the index of its row in kv_type_table(). Positions are not a file format:
/// saved caches record types by name (kv_type_traits().name). kF32, kF16 and kBF16 store elements as they are;
/// the others are ggml's (llama.cpp's `--cache-type-k`) block formats of 32 elements (kernels/quant.h):
///   Q8_0: binary16 scale d = max|x|/127 and 32 int8 q, x̂ = d·q, 34 bytes per block;
///   Q4_0: binary16 scale d = m/−8 (m the signed element of largest magnitude) and 32 nibbles q, x̂ = (q − 8)·d,
///         18 bytes per block;
///   Q4_1: binary16 scale d = (max − min)/15 and binary16 minimum m, 32 nibbles q, x̂ = d·q + m, 20 bytes per block;
///   Q5_0: binary16 scale d = m/−16 and 32 five-bit q (low nibbles as Q4_0, fifth bits in a 32-bit word),
///         x̂ = (q − 16)·d, 22 bytes per block;
///   Q5_1: binary16 scale d = (max − min)/31 and binary16 minimum m, 32 five-bit q, x̂ = d·q + m, 24 bytes per block;
///   IQ4_NL: binary16 scale d (a weighted least-squares fit) and 32 four-bit indices i into the non-linear levels
///         v = kIQ4NLValues (−127 … 113), x̂ = d·v[i], 18 bytes per block.
/// Block types need a head dimension that is a multiple of 32.
enum class KVType : uint8_t { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kIQ4_NL };

/// The instruction sets a KV type's attend kernels are given for; the index into KVTypeTraits::attend.
enum class KernelIsa : uint8_t { kScalar, kAvx2, kAvx512 };
constexpr int kKernelIsaCount = 3;
/// The instruction set of a kernel set (dot_kernels_scalar / _avx2 / _avx512, as KVSIEVE_ISA chooses it).
KernelIsa kernel_isa(const DotKernels& dk);

/// One online-softmax step of decode attention (Milakov & Gimelshein 2018; Dao et al. 2022, FlashAttention,
/// Alg. 1) over n ≤ 16 cached rows of one KV head for its G query heads:
///   k: n key rows of type kt back to back (row_bytes(kt, d) bytes each), v: n value rows of type vt likewise;
///   q: float32 [G][d]; m, l: float32 [G] running max and normaliser; o: float32 [G][d] unnormalised output;
///   s_out (optional): the scaled scores q·k·scale at s_out[g·s_stride + j].
/// d ≤ 256 (a multiple of the block of kt and vt). A row's kernel takes keys of its own type and values of any
/// KV type.
using KVAttendFn = void (*)(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d, const float* q,
                            int G, float scale, float* m, float* l, float* o, float* s_out, int64_t s_stride);

/// One row of the table: everything the pool, the page store, the kernels, the command line and saved caches need
/// to know about an element type (the design of ggml's type_traits / type_traits_cpu).
struct KVTypeTraits {
    KVType type;
    /// llama.cpp's spelling (`--cache-type-k q8_0`); how saved caches record the type.
    const char* name;
    /// Elements per block (1 for f32, f16, bf16; 32 for the block types).
    int block;
    /// Bytes per block.
    int block_bytes;
    /// The largest magnitude stored: elements are clamped to ±limit before from_float so that a block's binary16
    /// scale (and minimum) stays finite — 65504 (binary16's largest finite value) times the largest |q| the scale
    /// multiplies (127 for Q8_0, 8 for Q4_0, 16 for Q5_0), 65504 for Q4_1 and Q5_1 (their minimum is a binary16 itself),
    /// 65504 · 16 for IQ4_NL (its least-squares scale is a weighted mean of x_j / v_j, each below 7·|m|/127 since
    /// x_j/(|m|/127) < 7 where level 1 is chosen, so |d| < 65504); +inf for the float types, stored as they are.
    float limit;
    /// The weights' tensor type of the same layout (kernels/tensor_types.h), which the attend kernels take.
    TensorType tensor;
    /// The type a query row is converted to before its dot product with keys of this type (ggml's vec_dot_type):
    /// Q8_0 for Q8_0, Q4_0, Q5_0 and IQ4_NL keys, Q8_1 for Q4_1 and Q5_1 keys, F32 for the float types (dotted as
    /// they are).
    TensorType query_dot_type;
    /// float32 [n] → one row of n elements (n a multiple of block; no clamping, see store_row): binary16 / bfloat16
    /// round to nearest even; the block types by ggml's reference quantizers (quantize_row_q8_0 / _q4_0 / _q4_1 /
    /// _q5_0 / _q5_1 / _iq4_nl).
    void (*from_float)(const float* x, void* y, int64_t n);
    /// One row of n elements → float32 [n] (the dequantization formula above), with the active kernel set.
    void (*to_float)(const void* x, float* y, int64_t n);
    /// The decode-attention kernel for pages whose keys are of this type, per KernelIsa (scalar, AVX2, AVX-512).
    KVAttendFn attend[kKernelIsaCount];
    /// What the attend kernels are per instruction set, in a few words (a set without its own kernel says so).
    const char* attend_note;
};

/// Every row, in KVType order.
std::span<const KVTypeTraits> kv_type_table();
/// The row of t. Throws Error for a value outside the table (an unknown type is never read as another).
const KVTypeTraits& kv_type_traits(KVType t);
/// The row named `name` (llama.cpp's spelling, e.g. "q8_0"), or none.
std::optional<KVType> find_kv_type(std::string_view name);

/// Bytes of one cached row of n elements of type t (n / block · block_bytes). Throws Error (check_kv_head_dim)
/// when n is not a multiple of t's block.
size_t kv_row_bytes(KVType t, int n);
/// Elements per block of t (1 for the float types).
int kv_type_block(KVType t);
/// True for the block-quantized types (block > 1).
inline bool kv_type_quantized(KVType t) { return kv_type_block(t) > 1; }
/// Throws Error naming the type and the dimension when rows of head_dim elements cannot be stored as t (head_dim not
/// positive, or not a multiple of t's block).
void check_kv_head_dim(KVType t, int head_dim);
/// The row's name: "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl".
std::string kv_type_name(KVType t);
/// Every row's name, comma separated, in table order, for help texts and errors.
std::string kv_type_names();
/// Parses one of kv_type_names(); throws Error naming the value and the supported types otherwise.
KVType parse_kv_type(const std::string& s);

/// One decode-attention step (KVAttendFn) over keys of type kt and values of type vt with kernel set dk: the
/// kernel kv_type_traits(kt).attend[kernel_isa(dk)], given both rows' tensor types.
void kv_attend_rows(const DotKernels& dk, KVType kt, const void* k, KVType vt, const void* v, int n, int d,
                    const float* q, int G, float scale, float* m, float* l, float* o, float* s_out, int64_t s_stride);

}  // namespace kvsieve
