#pragma once
// The decode-attention kernels of the KV element types per instruction set: the entries of the table's
// KVTypeTraits::attend (kernels/kv_types.h). Each has the KVAttendFn shapes and takes keys of the type in its name
// and values of any KV type. The scalar set (dot_scalar.cpp) runs attention_generic.inc's kernels as they are; the
// AVX2 and AVX-512 sets (dot_avx2.cpp, dot_avx512.cpp) run the same generic kernels compiled with their flags and
// their integer dot products, and first try their specialised kernels where one exists: binary16 pages of F16 keys
// and values (attend_f16_avx2.h / attend_f16_avx512.h), and Q8_0 / Q4_0 keys with Q8_0, Q4_0 or F16 values
// (attend_quant.h), which compute the same.
#include "kernels/kv_types.h"

// Declares one instruction set's entries:
//   kv_attend_float — F32 keys (read directly) and BF16 keys (converted to float32 first), float32 dot products;
//   kv_attend_f16   — F16 keys, read directly;
//   kv_attend_q8_0  — Q8_0 keys against the query as Q8_0 blocks (integer dots, ggml's vec_dot_q8_0_q8_0);
//   kv_attend_q4_0  — Q4_0 keys against the query as Q8_0 blocks (ggml's vec_dot_q4_0_q8_0);
//   kv_attend_q4_1  — Q4_1 keys against the query as Q8_1 blocks (ggml's vec_dot_q4_1_q8_1);
//   kv_attend_q5_0  — Q5_0 keys against the query as Q8_0 blocks (ggml's vec_dot_q5_0_q8_0);
//   kv_attend_q5_1  — Q5_1 keys against the query as Q8_1 blocks (ggml's vec_dot_q5_1_q8_1);
//   kv_attend_iq4_nl — IQ4_NL keys against the query as Q8_0 blocks (ggml's vec_dot_iq4_nl_q8_0).
#define KVSIEVE_DECLARE_KV_ATTEND(fn)                                                                        \
    void fn(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d, const float* q, int G, \
            float scale, float* m, float* l, float* o, float* s_out, int64_t s_stride)

namespace kvsieve {
namespace scalar {
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_float);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_f16);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q8_0);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q4_0);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q4_1);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q5_0);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q5_1);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_iq4_nl);
}  // namespace scalar
namespace avx2 {
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_float);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_f16);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q8_0);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q4_0);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q4_1);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q5_0);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q5_1);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_iq4_nl);
}  // namespace avx2
namespace avx512 {
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_float);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_f16);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q8_0);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q4_0);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q4_1);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q5_0);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q5_1);
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_iq4_nl);
}  // namespace avx512
}  // namespace kvsieve
