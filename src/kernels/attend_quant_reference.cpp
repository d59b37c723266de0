// Scalar reference of decode attention over quantized KV pages (kernels/attend_quant.h): the readable definition
// the AVX2 and AVX-512 kernels are tested against.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attend_quant.h"
#include "util/error.h"

namespace kvsieve {
namespace {

/// Integer i (0..31) of block b of a key row: Q8_0 its int8, Q4_0 its nibble − 8 (low nibbles hold 0..15,
/// high nibbles 16..31).
int key_int(TensorType kt, const uint8_t* row, int b, int i) {
    if (kt == TensorType::Q8_0) return reinterpret_cast<const BlockQ8_0*>(row)[b].qs[i];
    const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
    const int nib = i < QK8_0 / 2 ? (blk.qs[i] & 0xF) : (blk.qs[i - QK8_0 / 2] >> 4);
    return nib - 8;
}

/// Binary16 scale of block b of a key row.
float key_scale(TensorType kt, const uint8_t* row, int b) {
    return fp16_to_fp32(kt == TensorType::Q8_0 ? reinterpret_cast<const BlockQ8_0*>(row)[b].d
                                               : reinterpret_cast<const BlockQ4_0*>(row)[b].d);
}

void check_shape(TensorType kt, TensorType vt, int d, int G) {
    require(is_quant_attend_pair(kt, vt),
            "quantized-page attention takes Q8_0 or Q4_0 keys with Q8_0, Q4_0 or F16 "
            "values, not ",
            type_name(kt), " keys with ", type_name(vt), " values");
    require(d > 0 && d % QK8_0 == 0,
            "quantized-page attention needs a head dimension that is a positive multiple "
            "of 32, not ",
            d);
    require(G >= 1, "quantized-page attention needs at least one query head, not ", G);
}

}  // namespace

void attend_rows_quant_q8_reference(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d,
                                    const BlockQ8_0* qq, int G, float scale, float* m, float* l, float* o, float* s_out,
                                    int64_t s_stride) {
    check_shape(kt, vt, d, G);
    const int nb = d / QK8_0;
    const size_t kb = row_bytes(kt, d), vb = row_bytes(vt, d);
    const auto* K = static_cast<const uint8_t*>(k);
    const auto* V = static_cast<const uint8_t*>(v);
    std::vector<float> s(n), vrow(d);
    for (int g = 0; g < G; ++g) {
        const BlockQ8_0* qg = qq + static_cast<int64_t>(g) * nb;
        // Scores: integer dot product per block, scaled by both blocks' binary16 scales.
        float mx = m[g];
        for (int j = 0; j < n; ++j) {
            const uint8_t* krow = K + j * kb;
            float acc = 0;
            for (int b = 0; b < nb; ++b) {
                int32_t sumi = 0;
                for (int i = 0; i < QK8_0; ++i) sumi += key_int(kt, krow, b, i) * qg[b].qs[i];
                acc += static_cast<float>(sumi) * (key_scale(kt, krow, b) * fp16_to_fp32(qg[b].d));
            }
            s[j] = acc * scale;
            mx = std::max(mx, s[j]);
            if (s_out) s_out[g * s_stride + j] = s[j];
        }
        // Online softmax: rescale the running sums to the new maximum, then add this page's rows.
        const float corr = m[g] == -INFINITY ? 0.0f : std::exp(m[g] - mx);
        float* og = o + static_cast<int64_t>(g) * d;
        for (int c = 0; c < d; ++c) og[c] *= corr;
        float sum = l[g] * corr;
        for (int j = 0; j < n; ++j) {
            const float p = std::exp(s[j] - mx);
            sum += p;
            dequantize_row(vt, V + j * vb, vrow.data(), d);
            for (int c = 0; c < d; ++c) og[c] += p * vrow[c];
        }
        l[g] = sum;
        m[g] = mx;
    }
}

void attend_rows_quant_reference(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d,
                                 const float* q, int G, float scale, float* m, float* l, float* o, float* s_out,
                                 int64_t s_stride) {
    check_shape(kt, vt, d, G);
    std::vector<BlockQ8_0> qq(static_cast<size_t>(G) * (d / QK8_0));
    quantize_row_q8_0_activations(q, qq.data(), static_cast<int64_t>(G) * d);
    attend_rows_quant_q8_reference(kt, k, vt, v, n, d, qq.data(), G, scale, m, l, o, s_out, s_stride);
}

}  // namespace kvsieve
