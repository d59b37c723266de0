// The table of KV element types (kernels/kv_types.h): one row per type.
#include "kernels/kv_types.h"

#include <cmath>
#include <cstring>

#include "kernels/dot.h"
#include "kernels/fp16.h"
#include "kernels/kv_attend.h"
#include "kernels/quant.h"
#include "util/error.h"

namespace kvsieve {
namespace {

void f32_from_float(const float* x, void* y, int64_t n) { std::memcpy(y, x, sizeof(float) * n); }
void f16_from_float(const float* x, void* y, int64_t n) { dot_kernels().to_f16(x, static_cast<uint16_t*>(y), n); }
void bf16_from_float(const float* x, void* y, int64_t n) {
    auto* d = static_cast<uint16_t*>(y);
    for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(x[i]);
}
void q8_0_from_float(const float* x, void* y, int64_t n) { quantize_row_q8_0(x, static_cast<BlockQ8_0*>(y), n); }
void q4_0_from_float(const float* x, void* y, int64_t n) { quantize_row_q4_0(x, static_cast<BlockQ4_0*>(y), n); }
void q4_1_from_float(const float* x, void* y, int64_t n) { quantize_row_q4_1(x, static_cast<BlockQ4_1*>(y), n); }
void q5_0_from_float(const float* x, void* y, int64_t n) { quantize_row_q5_0(x, static_cast<BlockQ5_0*>(y), n); }
void q5_1_from_float(const float* x, void* y, int64_t n) { quantize_row_q5_1(x, static_cast<BlockQ5_1*>(y), n); }
void iq4_nl_from_float(const float* x, void* y, int64_t n) { quantize_row_iq4_nl(x, static_cast<BlockIQ4_NL*>(y), n); }

void f32_to_float(const void* x, float* y, int64_t n) { std::memcpy(y, x, sizeof(float) * n); }
/// Rows of a type the weights share, dequantized by the active kernel set (kernels/quant.h dequantize_row formulas).
template <TensorType T>
void tensor_to_float(const void* x, float* y, int64_t n) {
    dot_kernels().dequant_row(T, x, y, n);
}

constexpr float kHalfMax = 65504.0f;  // binary16's largest finite value

// clang-format off
constexpr KVTypeTraits kTable[] = {
    {KVType::kF32, "f32", 1, 4, INFINITY, TensorType::F32, TensorType::F32, f32_from_float, f32_to_float,
     {scalar::kv_attend_float, avx2::kv_attend_float, avx512::kv_attend_float},
     "float32 dot products on every set"},
    {KVType::kF16, "f16", 1, 2, INFINITY, TensorType::F16, TensorType::F32, f16_from_float,
     tensor_to_float<TensorType::F16>,
     {scalar::kv_attend_f16, avx2::kv_attend_f16, avx512::kv_attend_f16},
     "binary16 rows read directly; AVX2 / AVX-512: the specialised binary16 kernel for F16 values"},
    {KVType::kBF16, "bf16", 1, 2, INFINITY, TensorType::BF16, TensorType::F32, bf16_from_float,
     tensor_to_float<TensorType::BF16>,
     {scalar::kv_attend_float, avx2::kv_attend_float, avx512::kv_attend_float},
     "converted to float32, float32 dot products on every set"},
    {KVType::kQ8_0, "q8_0", 32, 34, kHalfMax * 127.0f, TensorType::Q8_0, TensorType::Q8_0, q8_0_from_float,
     tensor_to_float<TensorType::Q8_0>,
     {scalar::kv_attend_q8_0, avx2::kv_attend_q8_0, avx512::kv_attend_q8_0},
     "integer Q8_0 x Q8_0 dots; AVX2 / AVX-512: the specialised quantized-page kernel for Q8_0, Q4_0, F16 values"},
    {KVType::kQ4_0, "q4_0", 32, 18, kHalfMax * 8.0f, TensorType::Q4_0, TensorType::Q8_0, q4_0_from_float,
     tensor_to_float<TensorType::Q4_0>,
     {scalar::kv_attend_q4_0, avx2::kv_attend_q4_0, avx512::kv_attend_q4_0},
     "integer Q4_0 x Q8_0 dots; AVX2 / AVX-512: the specialised quantized-page kernel for Q8_0, Q4_0, F16 values"},
    {KVType::kQ4_1, "q4_1", 32, 20, kHalfMax, TensorType::Q4_1, TensorType::Q8_1, q4_1_from_float,
     tensor_to_float<TensorType::Q4_1>,
     {scalar::kv_attend_q4_1, avx2::kv_attend_q4_1, avx512::kv_attend_q4_1},
     "integer Q4_1 x Q8_1 dots (the set's DotKernels::q4_1) in the generic kernel; no specialised page kernel"},
    {KVType::kQ5_0, "q5_0", 32, 22, kHalfMax * 16.0f, TensorType::Q5_0, TensorType::Q8_0, q5_0_from_float,
     tensor_to_float<TensorType::Q5_0>,
     {scalar::kv_attend_q5_0, avx2::kv_attend_q5_0, avx512::kv_attend_q5_0},
     "integer Q5_0 x Q8_0 dots (the set's DotKernels::q5_0) in the generic kernel; no specialised page kernel"},
    {KVType::kQ5_1, "q5_1", 32, 24, kHalfMax, TensorType::Q5_1, TensorType::Q8_1, q5_1_from_float,
     tensor_to_float<TensorType::Q5_1>,
     {scalar::kv_attend_q5_1, avx2::kv_attend_q5_1, avx512::kv_attend_q5_1},
     "integer Q5_1 x Q8_1 dots (the set's DotKernels::q5_1) in the generic kernel; no specialised page kernel"},
    {KVType::kIQ4_NL, "iq4_nl", 32, 18, kHalfMax * 16.0f, TensorType::IQ4_NL, TensorType::Q8_0, iq4_nl_from_float,
     tensor_to_float<TensorType::IQ4_NL>,
     {scalar::kv_attend_iq4_nl, avx2::kv_attend_iq4_nl, avx512::kv_attend_iq4_nl},
     "integer IQ4_NL x Q8_0 dots in the generic kernel (scalar: g_dot_iq4_nl; AVX2 / AVX-512: x86_dot_iq4_nl, levels "
     "by byte shuffle); no specialised page kernel"},
};
// clang-format on

constexpr bool rows_in_enum_order() {
    for (size_t i = 0; i < std::size(kTable); ++i)
        if (static_cast<size_t>(kTable[i].type) != i) return false;
    return true;
}
static_assert(rows_in_enum_order(), "kv_type_table(): row i must describe KVType i");

}  // namespace

KernelIsa kernel_isa(const DotKernels& dk) {
    if (&dk == &dot_kernels_avx512()) return KernelIsa::kAvx512;
    if (&dk == &dot_kernels_avx2()) return KernelIsa::kAvx2;
    return KernelIsa::kScalar;
}

std::span<const KVTypeTraits> kv_type_table() { return kTable; }

const KVTypeTraits& kv_type_traits(KVType t) {
    const auto i = static_cast<size_t>(t);
    if (i >= std::size(kTable)) fail("KV cache: unknown element type ", i, " (supported: ", kv_type_names(), ")");
    return kTable[i];
}

std::optional<KVType> find_kv_type(std::string_view name) {
    for (const KVTypeTraits& r : kTable)
        if (name == r.name) return r.type;
    return std::nullopt;
}

int kv_type_block(KVType t) { return kv_type_traits(t).block; }

void check_kv_head_dim(KVType t, int head_dim) {
    require(head_dim > 0, "KV cache: head dimension must be positive, got ", head_dim);
    const int b = kv_type_block(t);
    require(head_dim % b == 0, "KV cache type ", kv_type_name(t), " stores blocks of ", b, " elements; head dimension ",
            head_dim, " is not a multiple of ", b, " (use f16, bf16 or f32)");
}

size_t kv_row_bytes(KVType t, int n) {
    check_kv_head_dim(t, n);
    const KVTypeTraits& r = kv_type_traits(t);
    return static_cast<size_t>(r.block_bytes) * static_cast<size_t>(n / r.block);
}

std::string kv_type_name(KVType t) { return kv_type_traits(t).name; }

std::string kv_type_names() {
    std::string s;
    for (const KVTypeTraits& r : kTable) s += (s.empty() ? "" : ", ") + std::string(r.name);
    return s;
}

KVType parse_kv_type(const std::string& s) {
    if (const std::optional<KVType> t = find_kv_type(s)) return *t;
    fail("unknown KV cache type '", s, "' (supported: ", kv_type_names(), ")");
}

void kv_attend_rows(const DotKernels& dk, KVType kt, const void* k, KVType vt, const void* v, int n, int d,
                    const float* q, int G, float scale, float* m, float* l, float* o, float* s_out, int64_t s_stride) {
    const KVTypeTraits& K = kv_type_traits(kt);
    K.attend[static_cast<int>(kernel_isa(dk))](K.tensor, k, kv_type_traits(vt).tensor, v, n, d, q, G, scale, m, l, o,
                                               s_out, s_stride);
}

}  // namespace kvsieve
