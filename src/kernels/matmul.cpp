#include "kernels/matmul.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/dot.h"
#include "kernels/repack.h"
#include "util/error.h"

namespace kvsieve {
namespace {

/// Activations in the form a weight type's dot kernel expects.
struct PreparedX {
    const float* f32 = nullptr;   // [T][cols]
    std::vector<BlockQ8_0> q8;    // [T][cols/32] for weights dotted with Q8_0 activations
    std::vector<BlockQ8_1> q81;   // [T][cols/32] for weights dotted with Q8_1 activations
    std::vector<BlockQ8K> q8k;    // [T][cols/256] for weights dotted with Q8_K activations
    int64_t q8_stride = 0;        // blocks per token of whichever of q8, q81, q8k is used
    AlignedBuffer split_q;        // [T][cols] int8 for split-layout Q8_0 weights
    std::vector<float> split_d;   // [T][cols/32]
    std::vector<float> xd, xsum;  // [T][blocks] float32 scales (and Q8_1 sums) of q8 / q81 for the multi-row kernels
};

/// Makes `p` X [T][cols] in the form W's dot kernel expects. `p`'s buffers keep their capacity (a warm scratch
/// prepares without allocating); those W does not use are left empty.
void prepare(const DotKernels& k, const WeightMatrix& W, const float* X, int64_t T, PreparedX& p) {
    p.f32 = X;
    p.q8_stride = 0;
    p.q8.clear();
    p.q81.clear();
    p.q8k.clear();
    p.split_d.clear();
    p.xd.clear();
    p.xsum.clear();
    const TensorType act = activation_type(W.type);
    if (act == TensorType::Q8_1) {
        p.q8_stride = W.cols / QK8_0;
        p.q81.resize(static_cast<size_t>(T * p.q8_stride));
        for (int64_t t = 0; t < T; ++t) k.quantize_q8_1(X + t * W.cols, p.q81.data() + t * p.q8_stride, W.cols);
    }
    if (act == TensorType::Q8_K) {
        p.q8_stride = W.cols / QK_K;
        p.q8k.resize(static_cast<size_t>(T * p.q8_stride));
        for (int64_t t = 0; t < T; ++t) k.quantize_q8_k(X + t * W.cols, p.q8k.data() + t * p.q8_stride, W.cols);
    }
    if (act == TensorType::Q8_0) {
        p.q8_stride = W.cols / QK8_0;
        p.q8.resize(static_cast<size_t>(T * p.q8_stride));
        for (int64_t t = 0; t < T; ++t) k.quantize_q8_0(X + t * W.cols, p.q8.data() + t * p.q8_stride, W.cols);
        if (W.layout == RowLayout::kSplitQ8) {
            if (p.split_q.size() < static_cast<size_t>(T * W.cols)) p.split_q = AlignedBuffer(T * W.cols);
            p.split_d.resize(p.q8.size());
            for (size_t b = 0; b < p.q8.size(); ++b) {
                std::memcpy(p.split_q.data() + b * QK8_0, p.q8[b].qs, QK8_0);
                p.split_d[b] = fp16_to_fp32(p.q8[b].d);
            }
        }
    }
    if (T > 1 && W.layout == RowLayout::kGGUF &&
        ((act == TensorType::Q8_1 && k.q4_1_rows) || (act == TensorType::Q8_0 && k.q8_0_rows))) {
        const size_t n = static_cast<size_t>(T * p.q8_stride);
        p.xd.resize(n);
        for (size_t j = 0; j < n; ++j) p.xd[j] = fp16_to_fp32(act == TensorType::Q8_1 ? p.q81[j].d : p.q8[j].d);
        if (act == TensorType::Q8_1) {
            p.xsum.resize(n);
            for (size_t j = 0; j < n; ++j) p.xsum[j] = fp16_to_fp32(p.q81[j].s);
        }
    }
}

/// The prepared activations of this thread's products, reused from call to call: they grow to the largest product
/// seen (rows × columns, distinct activation formats), after which a product allocates nothing.
struct MatmulScratch {
    PreparedX single;                // gemv's
    std::vector<PreparedX> shared;   // matmul_shared_input's, one per distinct (activation format, row layout)
    std::vector<size_t> prep_of;     // [targets] which of `shared` a target reads
    std::vector<int64_t> first_row;  // [targets + 1] each target's first row among all targets' rows
};
MatmulScratch& matmul_scratch() {
    thread_local MatmulScratch s;
    return s;
}

inline float dot_row(const DotKernels& k, const WeightMatrix& W, int64_t r, const PreparedX& p, int64_t t) {
    const uint8_t* w = W.row(r);
    const float* x = p.f32 + t * W.cols;
    switch (W.type) {
        case TensorType::F32: return k.f32(reinterpret_cast<const float*>(w), x, W.cols);
        case TensorType::F16: return k.f16(reinterpret_cast<const uint16_t*>(w), x, W.cols);
        case TensorType::BF16: return k.bf16(reinterpret_cast<const uint16_t*>(w), x, W.cols);
        case TensorType::Q8_0:
            if (W.layout == RowLayout::kSplitQ8)
                return k.q8_0_split(reinterpret_cast<const int8_t*>(w), reinterpret_cast<const uint16_t*>(w + W.cols),
                                    reinterpret_cast<const int8_t*>(p.split_q.data()) + t * W.cols,
                                    p.split_d.data() + t * p.q8_stride, W.cols / QK8_0);
            return k.q8_0(reinterpret_cast<const BlockQ8_0*>(w), p.q8.data() + t * p.q8_stride, W.cols / QK8_0);
        case TensorType::Q4_0: return k.q4_0(reinterpret_cast<const BlockQ4_0*>(w), x, W.cols / QK8_0);
        case TensorType::Q4_1:
            return k.q4_1(reinterpret_cast<const BlockQ4_1*>(w), p.q81.data() + t * p.q8_stride, W.cols / QK8_0);
        case TensorType::Q5_0:
            return k.q5_0(reinterpret_cast<const BlockQ5_0*>(w), p.q8.data() + t * p.q8_stride, W.cols / QK8_0);
        case TensorType::Q5_1:
            return k.q5_1(reinterpret_cast<const BlockQ5_1*>(w), p.q81.data() + t * p.q8_stride, W.cols / QK8_0);
        case TensorType::Q2_K:
            return k.q2_k(reinterpret_cast<const BlockQ2K*>(w), p.q8k.data() + t * p.q8_stride, W.cols / QK_K);
        case TensorType::Q3_K:
            return k.q3_k(reinterpret_cast<const BlockQ3K*>(w), p.q8k.data() + t * p.q8_stride, W.cols / QK_K);
        case TensorType::Q5_K:
            return k.q5_k(reinterpret_cast<const BlockQ5K*>(w), p.q8k.data() + t * p.q8_stride, W.cols / QK_K);
        case TensorType::Q4_K: return k.q4_k(reinterpret_cast<const BlockQ4K*>(w), x, W.cols / QK_K);
        case TensorType::Q6_K: return k.q6_k(reinterpret_cast<const BlockQ6K*>(w), x, W.cols / QK_K);
        default: break;
    }
    return 0;
}

/// Y[t·ldy + r] for every t < T: row r of W against all T activation rows, kDotRowsMax at a time through the
/// type's multi-row kernel where the instruction set has one (the same numbers as dot_row per row).
inline void dot_all_rows(const DotKernels& k, const WeightMatrix& W, int64_t r, const PreparedX& p, int64_t T, float* Y,
                         int64_t ldy) {
    auto batched = [&](auto kernel) {
        float out[kDotRowsMax];
        for (int64_t t = 0; t < T; t += kDotRowsMax) {
            const int n = static_cast<int>(std::min<int64_t>(kDotRowsMax, T - t));
            kernel(t * p.q8_stride, n, out);
            for (int i = 0; i < n; ++i) Y[(t + i) * ldy + r] = out[i];
        }
    };
    const int64_t nb = W.cols / QK8_0;
    const bool multi = !p.xd.empty() && W.layout == RowLayout::kGGUF;
    if (multi && W.type == TensorType::Q4_1 && k.q4_1_rows)
        return batched([&](int64_t o, int n, float* out) {
            k.q4_1_rows(reinterpret_cast<const BlockQ4_1*>(W.row(r)), p.q81.data() + o, p.xd.data() + o,
                        p.xsum.data() + o, p.q8_stride, n, nb, out);
        });
    if (multi && W.type == TensorType::Q8_0 && k.q8_0_rows)
        return batched([&](int64_t o, int n, float* out) {
            k.q8_0_rows(reinterpret_cast<const BlockQ8_0*>(W.row(r)), p.q8.data() + o, p.xd.data() + o, p.q8_stride, n,
                        nb, out);
        });
    for (int64_t t = 0; t < T; ++t) Y[t * ldy + r] = dot_row(k, W, r, p, t);
}

void gemv(const DotKernels& k, const WeightMatrix& W, const float* X, int64_t T, float* Y, int64_t ldy) {
    PreparedX& p = matmul_scratch().single;
    prepare(k, W, X, T, p);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < W.rows; ++r) dot_all_rows(k, W, r, p, T, Y, ldy);
}

/// One row of W as float32, whatever its layout.
inline void dequant_weight_row(const DotKernels& k, const WeightMatrix& W, int64_t r, float* dst) {
    if (W.layout == RowLayout::kSplitQ8) {
        const int8_t* q = split_q8_quants(W, r);
        const uint16_t* d = split_q8_scales(W, r);
        for (int64_t b = 0; b < W.cols / QK8_0; ++b) {
            const float s = fp16_to_fp32(d[b]);
            for (int j = 0; j < QK8_0; ++j) dst[b * QK8_0 + j] = s * q[b * QK8_0 + j];
        }
        return;
    }
    k.dequant_row(W.type, W.row(r), dst, W.cols);
}

/// Y[T][N] (row stride ldy) = X[T][K] · B[N][K]ᵀ (B's row stride ldb), as tiles of kGemmTokenBlock × kGemmColBlock
/// outputs, one single-threaded SGEMM per tile run on kvsieve's threads. The tiles depend only on T and N, and
/// OpenBLAS runs one thread inside an active OpenMP region (and at -t 1), so each output is computed by the same call
/// at any thread count. (One multi-threaded SGEMM over the whole product is not bit-reproducible across thread
/// counts: OpenBLAS 0.3.21's Haswell/Zen kernels give different last bits for some outputs at 1, 2, 4 and 16
/// threads; see docs/benchmarks.md.)
void sgemm_tiles(const float* X, int64_t T, int64_t K, const float* B, int64_t ldb, int64_t N, float* Y, int64_t ldy) {
    const int64_t row_tiles = (T + kGemmTokenBlock - 1) / kGemmTokenBlock;
    const int64_t col_tiles = (N + kGemmColBlock - 1) / kGemmColBlock;
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < row_tiles * col_tiles; ++i) {
        const int64_t t0 = i / col_tiles * kGemmTokenBlock, c0 = i % col_tiles * kGemmColBlock;
        const int64_t m = std::min(kGemmTokenBlock, T - t0), n = std::min(kGemmColBlock, N - c0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                    static_cast<int>(K), 1.0f, X + t0 * K, static_cast<int>(K), B + c0 * ldb, static_cast<int>(ldb),
                    0.0f, Y + t0 * ldy + c0, static_cast<int>(ldy));
    }
}

void gemm_panels(const DotKernels& k, const WeightMatrix& W, const float* X, int64_t T, float* Y, int64_t ldy) {
    if (W.type == TensorType::F32) {
        sgemm_tiles(X, T, W.cols, reinterpret_cast<const float*>(W.data),
                    static_cast<int64_t>(W.row_bytes / sizeof(float)), W.rows, Y, ldy);
        return;
    }
    // Panels of about 2M weights (8 MB of float32) keep the scratch bounded for any matrix size; a multiple of the
    // tile width, so that the tiles are those of the whole matrix.
    const int64_t panel =
        std::min(std::max<int64_t>((int64_t{1} << 21) / W.cols / kGemmColBlock, 1) * kGemmColBlock, W.rows);
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(panel * W.cols));
    for (int64_t r0 = 0; r0 < W.rows; r0 += panel) {
        const int64_t n = std::min(panel, W.rows - r0);
        float* b = buf.data();
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n; ++r) dequant_weight_row(k, W, r0 + r, b + r * W.cols);
        sgemm_tiles(X, T, W.cols, b, W.cols, n, Y + r0, ldy);
    }
}

/// Whether matmul takes the panel-SGEMM path for W and T tokens (else the GEMV path).
bool gemm_path(const WeightMatrix& W, int64_t T) { return T >= kGemmMinTokens || (W.type == TensorType::F32 && T > 1); }

}  // namespace

void matmul(const WeightMatrix& W, const float* X, int64_t T, float* Y, int64_t ldy, MatmulPath path) {
    if (ldy < 0) ldy = W.rows;
    require(ldy >= W.rows, "matmul: output stride ", ldy, " is smaller than the ", W.rows, " rows of ", W.name);
    const DotKernels& k = dot_kernels();
    if (path == MatmulPath::kAuto && gemm_path(W, T))
        gemm_panels(k, W, X, T, Y, ldy);
    else
        gemv(k, W, X, T, Y, ldy);
}

void matmul_shared_input(const std::vector<MatmulTarget>& targets, const float* X, int64_t T, MatmulPath path) {
    if (targets.empty()) return;
    const int64_t cols = targets[0].W->cols;
    bool any_gemm = false;
    for (const MatmulTarget& t : targets) {
        require(t.W->cols == cols, "matmul_shared_input: ", t.W->name, " has ", t.W->cols, " columns, ",
                targets[0].W->name, " ", cols);
        any_gemm = any_gemm || (path == MatmulPath::kAuto && gemm_path(*t.W, T));
    }
    if (any_gemm) {
        for (const MatmulTarget& t : targets) matmul(*t.W, X, T, t.Y);
        return;
    }
    const DotKernels& k = dot_kernels();
    // One prepared copy of X per distinct (activation format, row layout); targets that agree share it.
    MatmulScratch& sc = matmul_scratch();
    std::vector<PreparedX>& preps = sc.shared;
    std::vector<size_t>& prep_of = sc.prep_of;
    std::vector<int64_t>& first_row = sc.first_row;
    prep_of.resize(targets.size());
    first_row.assign(targets.size() + 1, 0);
    size_t n_preps = 0;
    for (size_t i = 0; i < targets.size(); ++i) {
        const WeightMatrix& W = *targets[i].W;
        size_t j = 0;
        for (; j < i; ++j)
            if (activation_type(targets[j].W->type) == activation_type(W.type) && targets[j].W->layout == W.layout)
                break;
        if (j < i) {
            prep_of[i] = prep_of[j];
        } else {
            prep_of[i] = n_preps++;
            if (preps.size() < n_preps) preps.resize(n_preps);
            prepare(k, W, X, T, preps[prep_of[i]]);
        }
        first_row[i + 1] = first_row[i] + W.rows;
    }
    const int64_t total = first_row.back();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < total; ++r) {
        size_t i = 0;
        while (r >= first_row[i + 1]) ++i;
        const WeightMatrix& W = *targets[i].W;
        dot_all_rows(k, W, r - first_row[i], preps[prep_of[i]], T, targets[i].Y, W.rows);
    }
}

void matmul_reference(const WeightMatrix& W, const float* X, int64_t T, float* Y) {
    gemv(dot_kernels_scalar(), W, X, T, Y, W.rows);
}

void dequantize_weight_row(const WeightMatrix& W, int64_t r, float* dst) {
    dequant_weight_row(dot_kernels(), W, r, dst);
}

}  // namespace kvsieve
