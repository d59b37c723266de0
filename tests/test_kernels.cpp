// Fast kernels against the scalar references and against float64 products of dequantized weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "cli_runner.h"
#include "io/gguf.h"
#include "kernels/attention.h"
#include "kernels/blas_core.h"
#include "kernels/cpu_features.h"
#include "kernels/dot.h"
#include "kernels/fp16.h"
#include "kernels/kv_types.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/repack.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

using test::randn;

/// A weight matrix of `type` holding random values, with its storage.
struct OwnedMatrix {
    std::vector<uint8_t> bytes;
    WeightMatrix m;
};
OwnedMatrix make_matrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
    OwnedMatrix o;
    const auto f = randn(rows * cols, seed, 0.05f);
    o.m.type = type;
    o.m.rows = rows;
    o.m.cols = cols;
    o.m.row_bytes = row_bytes(type, cols);
    o.bytes.resize(o.m.row_bytes * rows);
    for (int64_t r = 0; r < rows; ++r)
        quantize_row(type, f.data() + r * cols, o.bytes.data() + r * o.m.row_bytes, cols);
    o.m.data = o.bytes.data();
    o.m.name = "test";
    return o;
}

/// Y = X · Wᵀ in float64 from the scalar dequantisation.
std::vector<double> exact_product(const WeightMatrix& W, const std::vector<float>& X, int64_t T) {
    std::vector<double> Y(T * W.rows);
    std::vector<float> row(W.cols);
    for (int64_t r = 0; r < W.rows; ++r) {
        dequantize_row(W.type, W.row(r), row.data(), W.cols);
        for (int64_t t = 0; t < T; ++t) {
            double s = 0;
            for (int64_t c = 0; c < W.cols; ++c) s += double(row[c]) * X[t * W.cols + c];
            Y[t * W.rows + r] = s;
        }
    }
    return Y;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

std::vector<const DotKernels*> available_kernel_sets() {
    std::vector<const DotKernels*> k{&dot_kernels_scalar()};
    if (cpu_features().has_avx2_set()) k.push_back(&dot_kernels_avx2());
    if (cpu_features().has_avx512_set()) k.push_back(&dot_kernels_avx512());
    return k;
}

TEST(Kernels, EveryInstructionSetMatchesScalarDots) {
    const int64_t n = 512 + 32;  // not a multiple of 64, exercising tails of the float kernels
    const auto x = randn(n, 1);
    const auto wf = randn(n, 2);
    std::vector<uint16_t> h(n), bf(n);
    quantize_row_f16(wf.data(), h.data(), n);
    quantize_row_bf16(wf.data(), bf.data(), n);
    std::vector<BlockQ8_0> wq(n / 32), xq(n / 32);
    quantize_row_q8_0(wf.data(), wq.data(), n);
    quantize_row_q8_0(x.data(), xq.data(), n);
    std::vector<BlockQ4_0> w4(n / 32);
    quantize_row_q4_0(wf.data(), w4.data(), n);
    const DotKernels& ref = dot_kernels_scalar();
    for (const DotKernels* k : available_kernel_sets()) {
        SCOPED_TRACE(k->isa);
        EXPECT_NEAR(k->f32(wf.data(), x.data(), n), ref.f32(wf.data(), x.data(), n), 1e-3);
        EXPECT_NEAR(k->f16(h.data(), x.data(), n), ref.f16(h.data(), x.data(), n), 1e-3);
        EXPECT_NEAR(k->bf16(bf.data(), x.data(), n), ref.bf16(bf.data(), x.data(), n), 1e-3);
        EXPECT_NEAR(k->q8_0(wq.data(), xq.data(), n / 32), ref.q8_0(wq.data(), xq.data(), n / 32), 1e-3);
        EXPECT_NEAR(k->q4_0(w4.data(), x.data(), n / 32), ref.q4_0(w4.data(), x.data(), n / 32), 1e-3);
        std::vector<float> a(n), b(n);
        k->dequant_row(TensorType::F16, h.data(), a.data(), n);
        ref.dequant_row(TensorType::F16, h.data(), b.data(), n);
        EXPECT_EQ(a, b);
    }
}

/// Σ_j dequant(w)_j · dequant(x)_j in float64: what an integer dot with quantized activations computes exactly
/// (up to the binary16 rounding of Q8_1's s).
template <class WBlock, class XBlock>
double dequantized_dot(TensorType wt, const std::vector<WBlock>& w, TensorType xt, const std::vector<XBlock>& x,
                       int64_t n) {
    std::vector<float> a(n), b(n);
    dequantize_row(wt, w.data(), a.data(), n);
    for (int64_t i = 0; i < n / 32; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < 32; ++j) b[i * 32 + j] = d * x[i].qs[j];
    }
    (void)xt;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(a[i]) * b[i];
    return s;
}

TEST(Kernels, LegacyQuantDotsWithQuantizedActivations) {
    const int64_t n = 32 * 19;  // odd block count: the two-block loops' tails
    const auto x = randn(n, 21);
    auto wf = randn(n, 22);
    for (int64_t i = 0; i < n; ++i) wf[i] += 0.3f * std::sin(0.05f * i);  // blocks with a non-zero mean (min ≠ −max)
    std::vector<BlockQ8_0> x80(n / 32);
    std::vector<BlockQ8_1> x81(n / 32);
    quantize_row_q8_0_activations(x.data(), x80.data(), n);
    quantize_row_q8_1_activations(x.data(), x81.data(), n);
    // Q8_1's s is d·Σq rounded to binary16.
    for (const auto& b : x81) {
        int sum = 0;
        for (int j = 0; j < 32; ++j) sum += b.qs[j];
        EXPECT_NEAR(fp16_to_fp32(b.s), fp16_to_fp32(b.d) * sum, std::fabs(fp16_to_fp32(b.d) * sum) * 1e-3 + 1e-6);
    }
    std::vector<BlockQ4_1> w41(n / 32);
    std::vector<BlockQ5_0> w50(n / 32);
    std::vector<BlockQ5_1> w51(n / 32);
    quantize_row_q4_1(wf.data(), w41.data(), n);
    quantize_row_q5_0(wf.data(), w50.data(), n);
    quantize_row_q5_1(wf.data(), w51.data(), n);
    const DotKernels& ref = dot_kernels_scalar();
    // The integer references equal the float64 dot of the dequantized operands (offset term: s is rounded).
    EXPECT_NEAR(ref.q4_1(w41.data(), x81.data(), n / 32),
                dequantized_dot(TensorType::Q4_1, w41, TensorType::Q8_1, x81, n), 2e-2);
    EXPECT_NEAR(ref.q5_0(w50.data(), x80.data(), n / 32),
                dequantized_dot(TensorType::Q5_0, w50, TensorType::Q8_0, x80, n), 1e-3);
    EXPECT_NEAR(ref.q5_1(w51.data(), x81.data(), n / 32),
                dequantized_dot(TensorType::Q5_1, w51, TensorType::Q8_1, x81, n), 2e-2);
    for (const DotKernels* k : available_kernel_sets()) {
        SCOPED_TRACE(k->isa);
        for (int64_t nb : {int64_t{1}, int64_t{2}, n / 32}) {
            EXPECT_NEAR(k->q4_1(w41.data(), x81.data(), nb), ref.q4_1(w41.data(), x81.data(), nb), 1e-4);
            EXPECT_NEAR(k->q5_0(w50.data(), x80.data(), nb), ref.q5_0(w50.data(), x80.data(), nb), 1e-4);
            EXPECT_NEAR(k->q5_1(w51.data(), x81.data(), nb), ref.q5_1(w51.data(), x81.data(), nb), 1e-4);
        }
        std::vector<BlockQ8_1> y(n / 32);
        k->quantize_q8_1(x.data(), y.data(), n);
        EXPECT_EQ(std::memcmp(y.data(), x81.data(), y.size() * sizeof(BlockQ8_1)), 0);
        for (TensorType t : {TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1}) {
            std::vector<uint8_t> q(row_bytes(t, n));
            quantize_row(t, wf.data(), q.data(), n);
            std::vector<float> a(n), b(n);
            k->dequant_row(t, q.data(), a.data(), n);
            dequantize_row(t, q.data(), b.data(), n);
            EXPECT_EQ(a, b) << type_name(t);
        }
    }
}

TEST(Kernels, MultiRowDotsEqualTheSingleRowKernelBitForBit) {
    // Batched decode runs one weight row against up to kDotRowsMax activation rows; each result must be the one
    // the single-row kernel gives (a sequence in a batch gets the numbers it gets alone).
    for (int64_t nb : {int64_t{1}, int64_t{2}, int64_t{19}}) {
        SCOPED_TRACE(nb);
        const int64_t n = 32 * nb;
        auto wf = randn(n, 31);
        for (int64_t i = 0; i < n; ++i) wf[i] += 0.2f * std::cos(0.07f * i);
        std::vector<BlockQ4_1> w41(nb);
        std::vector<BlockQ8_0> w80(nb);
        quantize_row_q4_1(wf.data(), w41.data(), n);
        quantize_row_q8_0(wf.data(), w80.data(), n);
        const int64_t xs = nb + 3;  // a row stride wider than the row, as for padded activations
        std::vector<BlockQ8_1> x81(kDotRowsMax * xs);
        std::vector<BlockQ8_0> x80(kDotRowsMax * xs);
        std::vector<float> d81(x81.size()), s81(x81.size()), d80(x80.size());
        for (int i = 0; i < kDotRowsMax; ++i) {
            const auto x = randn(n, 40 + i, 1.0f + i);
            quantize_row_q8_1_activations(x.data(), x81.data() + i * xs, n);
            quantize_row_q8_0_activations(x.data(), x80.data() + i * xs, n);
        }
        for (size_t j = 0; j < x81.size(); ++j) {
            d81[j] = fp16_to_fp32(x81[j].d);
            s81[j] = fp16_to_fp32(x81[j].s);
            d80[j] = fp16_to_fp32(x80[j].d);
        }
        int tested = 0;
        for (const DotKernels* k : available_kernel_sets()) {
            SCOPED_TRACE(k->isa);
            for (int rows = 1; rows <= kDotRowsMax; ++rows) {
                float out[kDotRowsMax];
                if (k->q4_1_rows) {
                    k->q4_1_rows(w41.data(), x81.data(), d81.data(), s81.data(), xs, rows, nb, out);
                    for (int i = 0; i < rows; ++i) EXPECT_EQ(out[i], k->q4_1(w41.data(), x81.data() + i * xs, nb)) << i;
                    ++tested;
                }
                if (k->q8_0_rows) {
                    k->q8_0_rows(w80.data(), x80.data(), d80.data(), xs, rows, nb, out);
                    for (int i = 0; i < rows; ++i) EXPECT_EQ(out[i], k->q8_0(w80.data(), x80.data() + i * xs, nb)) << i;
                    ++tested;
                }
            }
        }
        if (cpu_features().has_avx2_set()) EXPECT_GT(tested, 0);
    }
}

TEST(Kernels, RowExactMatmulGivesEachRowWhatItGetsAlone) {
    // Any number of rows (multi-row groups and their remainders), both shared-input and single matmul.
    for (TensorType t : {TensorType::Q4_1, TensorType::Q8_0, TensorType::Q5_1, TensorType::Q4_0}) {
        SCOPED_TRACE(type_name(t));
        const auto W = make_matrix(t, 40, 576, 61);
        const auto V = make_matrix(t, 24, 576, 62);
        for (int64_t T : {int64_t{2}, int64_t{5}, int64_t{9}}) {
            SCOPED_TRACE(T);
            const auto X = randn(T * 576, 63);
            std::vector<float> Y(T * 40), Ys(T * 40), Vs(T * 24), alone(40), alone_v(24);
            matmul(W.m, X.data(), T, Y.data(), -1, MatmulPath::kRowExact);
            matmul_shared_input({{&W.m, Ys.data()}, {&V.m, Vs.data()}}, X.data(), T, MatmulPath::kRowExact);
            for (int64_t r = 0; r < T; ++r) {
                matmul(W.m, X.data() + r * 576, 1, alone.data());
                matmul(V.m, X.data() + r * 576, 1, alone_v.data());
                EXPECT_EQ(std::vector<float>(Y.begin() + r * 40, Y.begin() + (r + 1) * 40), alone) << r;
                EXPECT_EQ(std::vector<float>(Ys.begin() + r * 40, Ys.begin() + (r + 1) * 40), alone) << r;
                EXPECT_EQ(std::vector<float>(Vs.begin() + r * 24, Vs.begin() + (r + 1) * 24), alone_v) << r;
            }
        }
    }
}

TEST(Kernels, KQuantDotsMatchScalarOnRealBlocks) {
    // Q4_K and Q6_K blocks of a file written by llama.cpp's quantizer.
    GGUFFile f(test::model_path("tiny-qwen3-q4_k_m.gguf"));
    const auto* q4 = f.find_tensor("blk.0.attn_q.weight");
    const auto* q6 = f.find_tensor("token_embd.weight");
    ASSERT_EQ(q4->type, 12u);
    ASSERT_EQ(q6->type, 14u);
    const int64_t n = 256;
    const auto x = randn(n, 3);
    const DotKernels& ref = dot_kernels_scalar();
    for (const DotKernels* k : available_kernel_sets()) {
        SCOPED_TRACE(k->isa);
        for (int r = 0; r < 8; ++r) {
            const auto* b4 = reinterpret_cast<const BlockQ4K*>(q4->data) + r;
            const auto* b6 = reinterpret_cast<const BlockQ6K*>(q6->data) + r;
            EXPECT_NEAR(k->q4_k(b4, x.data(), 1), ref.q4_k(b4, x.data(), 1), 1e-4);
            EXPECT_NEAR(k->q6_k(b6, x.data(), 1), ref.q6_k(b6, x.data(), 1), 1e-4);
        }
    }
}

/// Σ_i dequant(w)_i · d_x·q_i in float64 for K-quant weights and Q8_K activations.
double dequantized_dot_q8k(TensorType wt, const void* w, const std::vector<BlockQ8K>& x, int64_t n) {
    std::vector<float> a(n);
    dequantize_row(wt, w, a.data(), n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(a[i]) * double(x[i / QK_K].d) * x[i / QK_K].qs[i % QK_K];
    return s;
}

TEST(Kernels, Q8KActivationsFollowGgmlsRounding) {
    std::vector<float> x = randn(512, 31);
    x[7] = 9.0f;     // block 0: largest magnitude positive → q = −127, d < 0
    x[300] = -7.5f;  // block 1: largest magnitude negative → q = −127, d > 0
    std::vector<BlockQ8K> q(2);
    quantize_row_q8_k(x.data(), q.data(), 512);
    EXPECT_EQ(q[0].qs[7], -127);
    EXPECT_FLOAT_EQ(q[0].d, -9.0f / 127);
    EXPECT_EQ(q[1].qs[300 - 256], -127);
    EXPECT_FLOAT_EQ(q[1].d, 7.5f / 127);
    for (int b = 0; b < 2; ++b)
        for (int j = 0; j < 16; ++j) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += q[b].qs[16 * j + i];
            EXPECT_EQ(q[b].bsums[j], sum);
            for (int i = 16 * j; i < 16 * j + 16; ++i)
                EXPECT_LE(std::fabs(x[256 * b + i] - q[b].d * q[b].qs[i]), std::fabs(q[b].d) * 0.5f + 1e-6f);
        }
    for (const DotKernels* k : available_kernel_sets()) {
        std::vector<BlockQ8K> y(2);
        k->quantize_q8_k(x.data(), y.data(), 512);
        EXPECT_EQ(std::memcmp(y.data(), q.data(), sizeof(BlockQ8K) * 2), 0) << k->isa;
    }
}

TEST(Kernels, KQuantDotsWithQ8KActivations) {
    // Blocks from two sources: kvsieve's quantizers on random rows (with a non-zero mean, so mins are used), and
    // the Q2_K / Q3_K / Q5_K blocks llama.cpp's llama-quantize wrote into the tiny-llama *-pure.gguf files.
    const int64_t n = 256 * 3;
    const auto x = randn(n, 41);
    auto wf = randn(n, 42);
    for (int64_t i = 0; i < n; ++i) wf[i] += 0.4f * std::sin(0.03f * i);
    std::vector<BlockQ8K> xq(n / QK_K);
    quantize_row_q8_k(x.data(), xq.data(), n);
    const DotKernels& ref = dot_kernels_scalar();
    const std::pair<TensorType, const char*> cases[] = {{TensorType::Q2_K, "tiny-llama-q2_k-pure.gguf"},
                                                        {TensorType::Q3_K, "tiny-llama-q3_k_s-pure.gguf"},
                                                        {TensorType::Q5_K, "tiny-llama-q5_k_s-pure.gguf"}};
    for (const auto& c : cases) {
        const TensorType t = c.first;  // a plain variable: lambdas below capture it
        SCOPED_TRACE(type_name(t));
        GGUFFile f(test::model_path(c.second));
        const GGUFTensorInfo* real = f.find_tensor("blk.0.ffn_down.weight");  // 512 columns: 2 blocks per row
        ASSERT_EQ(real->type, static_cast<uint32_t>(t));
        std::vector<uint8_t> ours(row_bytes(t, n));
        quantize_row(t, wf.data(), ours.data(), n);
        for (const uint8_t* w : {static_cast<const uint8_t*>(ours.data()), static_cast<const uint8_t*>(real->data)}) {
            auto dot = [&](const DotKernels& k, int64_t nb) -> float {
                switch (t) {
                    case TensorType::Q2_K: return k.q2_k(reinterpret_cast<const BlockQ2K*>(w), xq.data(), nb);
                    case TensorType::Q3_K: return k.q3_k(reinterpret_cast<const BlockQ3K*>(w), xq.data(), nb);
                    default: return k.q5_k(reinterpret_cast<const BlockQ5K*>(w), xq.data(), nb);
                }
            };
            // The integer reference is the float64 dot of the dequantized operands (float32 rounding only).
            const double exact = dequantized_dot_q8k(t, w, xq, n);
            EXPECT_NEAR(dot(ref, n / QK_K), exact, 1e-4 * (1 + std::fabs(exact)));
            for (const DotKernels* k : available_kernel_sets()) {
                SCOPED_TRACE(k->isa);
                for (int64_t nb : {int64_t{1}, n / QK_K}) {
                    const float want = dot(ref, nb);
                    EXPECT_NEAR(dot(*k, nb), want, 1e-5 * (1 + std::fabs(want)));
                }
                std::vector<float> a(n), b(n);
                k->dequant_row(t, w, a.data(), n);
                dequantize_row(t, w, b.data(), n);
                EXPECT_EQ(a, b);
            }
        }
    }
}

TEST(Kernels, MatmulGemvAndGemmPathsMatchExactProduct) {
    for (TensorType t :
         {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
          TensorType::Q5_0, TensorType::Q5_1, TensorType::Q2_K, TensorType::Q3_K, TensorType::Q5_K}) {
        SCOPED_TRACE(type_name(t));
        const auto W = make_matrix(t, 96, 256, 7);
        for (int64_t T : {int64_t{1}, int64_t{3}, kGemmMinTokens + 5}) {
            SCOPED_TRACE(T);
            const auto X = randn(T * 256, 11);
            std::vector<float> Y(T * 96), Yref(T * 96);
            matmul(W.m, X.data(), T, Y.data());
            const auto exact = exact_product(W.m, X, T);
            // GEMV with Q8_0 / Q8_1 / Q8_K activations (Q8_0, Q5_0, Q4_1, Q5_1 / Q2_K, Q3_K, Q5_K weights)
            // quantizes them (≈ 0.4% relative error per block); the rest is float rounding.
            const bool quantized_x = activation_type(t) != TensorType::F32 && T < kGemmMinTokens;
            const double tol = quantized_x ? 2e-2 : 1e-4;
            EXPECT_LE(max_abs_diff(Y, exact), tol);
            if (T < kGemmMinTokens && t != TensorType::F32) {
                matmul_reference(W.m, X.data(), T, Yref.data());
                double m = 0;
                for (size_t i = 0; i < Y.size(); ++i) m = std::max(m, double(std::fabs(Y[i] - Yref[i])));
                EXPECT_LE(m, 1e-4);
            }
        }
    }
}

TEST(Kernels, SharedInputMatmulEqualsSeparateProducts) {
    // Mixed weight types (three activation formats, one shared by two matrices) and both paths.
    const auto A = make_matrix(TensorType::Q4_1, 64, 256, 51), B = make_matrix(TensorType::F16, 32, 256, 52),
               C = make_matrix(TensorType::Q5_1, 48, 256, 53), D = make_matrix(TensorType::Q3_K, 16, 256, 54);
    for (int64_t T : {int64_t{1}, int64_t{3}, kGemmMinTokens + 1}) {
        SCOPED_TRACE(T);
        const auto X = randn(T * 256, 55);
        std::vector<float> ya(T * 64), yb(T * 32), yc(T * 48), yd(T * 16);
        matmul_shared_input({{&A.m, ya.data()}, {&B.m, yb.data()}, {&C.m, yc.data()}, {&D.m, yd.data()}}, X.data(), T);
        for (auto [W, y] : {std::pair{&A.m, &ya}, std::pair{&B.m, &yb}, std::pair{&C.m, &yc}, std::pair{&D.m, &yd}}) {
            std::vector<float> want(y->size());
            matmul(*W, X.data(), T, want.data());
            EXPECT_EQ(*y, want) << type_name(W->type);
        }
    }
    const auto E = make_matrix(TensorType::Q8_0, 8, 512, 56);
    const auto X = randn(512, 57);
    std::vector<float> y1(64), y2(8);
    EXPECT_THROW(matmul_shared_input({{&A.m, y1.data()}, {&E.m, y2.data()}}, X.data(), 1), Error);
}

TEST(Kernels, SplitQ8LayoutGivesTheSameProducts) {
    const auto W = make_matrix(TensorType::Q8_0, 80, 512 + 64, 9);  // 18 blocks: one 16-block step + a tail
    AlignedBuffer buf;
    const WeightMatrix S = repack_q8_0_split(W.m, buf);
    EXPECT_EQ(S.layout, RowLayout::kSplitQ8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(S.data) % 64, 0u);
    EXPECT_EQ(S.row_bytes % 64, 0u);
    for (int64_t T : {int64_t{1}, int64_t{2}, kGemmMinTokens}) {
        const auto X = randn(T * W.m.cols, 12);
        std::vector<float> a(T * 80), b(T * 80);
        matmul(W.m, X.data(), T, a.data());
        matmul(S, X.data(), T, b.data());
        for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4) << "T=" << T << " i=" << i;
    }
    std::vector<float> r1(W.m.cols), r2(W.m.cols);
    dequantize_weight_row(W.m, 5, r1.data());
    dequantize_weight_row(S, 5, r2.data());
    EXPECT_EQ(r1, r2);
    // Every instruction set's split kernel equals the scalar one on one row.
    const auto x = randn(W.m.cols, 13);
    std::vector<BlockQ8_0> xq(W.m.cols / 32);
    quantize_row_q8_0(x.data(), xq.data(), W.m.cols);
    AlignedBuffer q(W.m.cols);
    std::vector<float> d(xq.size());
    for (size_t i = 0; i < xq.size(); ++i) {
        std::memcpy(q.data() + i * 32, xq[i].qs, 32);
        d[i] = fp16_to_fp32(xq[i].d);
    }
    const auto* qs = reinterpret_cast<const int8_t*>(q.data());
    const float want = dot_kernels_scalar().q8_0_split(split_q8_quants(S, 3), split_q8_scales(S, 3), qs, d.data(), 18);
    for (const DotKernels* k : available_kernel_sets())
        EXPECT_NEAR(k->q8_0_split(split_q8_quants(S, 3), split_q8_scales(S, 3), qs, d.data(), 18), want, 1e-4)
            << k->isa;
}

TEST(Kernels, OutputStrideLeavesOtherColumnsAlone) {
    const auto W = make_matrix(TensorType::F16, 16, 64, 5);
    const auto X = randn(2 * 64, 6);
    std::vector<float> Y(2 * 20, -7.0f);
    matmul(W.m, X.data(), 2, Y.data(), 20);
    const auto exact = exact_product(W.m, X, 2);
    for (int t = 0; t < 2; ++t) {
        for (int r = 0; r < 16; ++r) EXPECT_NEAR(Y[t * 20 + r], exact[t * 16 + r], 1e-4);
        for (int r = 16; r < 20; ++r) EXPECT_EQ(Y[t * 20 + r], -7.0f);
    }
}

TEST(Kernels, GeluDotMatchesFloat64ErfForEveryIsa) {
    // WG-KV's gate MLP: Σ_j w_j · GELU(a_j + b_j), GELU(z) = z/2 · (1 + erf(z/√2)), written here in float64.
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{37}, int64_t{256}, int64_t{259}}) {
        auto a = randn(n, 71, 3.0f), b = randn(n, 72, 1.0f), w = randn(n, 73, 1.0f);
        a[0] = -12.0f;                         // far negative tail: GELU ≈ 0 (1 + erf must not cancel to garbage)
        if (n > 2) a[1] = 9.0f, a[2] = -0.0f;  // far positive (GELU ≈ z) and zero
        double want = 0, scale = 0;
        for (int64_t j = 0; j < n; ++j) {
            const double z = double(a[j]) + double(b[j]);
            const double g = 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0)));
            want += double(w[j]) * g;
            scale += std::fabs(double(w[j]) * g);
        }
        for (const DotKernels* k : available_kernel_sets()) {
            SCOPED_TRACE(testing::Message() << k->isa << " n=" << n);
            // float32 sums of n terms: a few ulps of the summed magnitudes; the polynomial's 1.5e-7 sits inside
            EXPECT_NEAR(k->gelu_dot(a.data(), b.data(), w.data(), n), want, 2e-6 * scale + 1e-7);
        }
    }
    // The negative tail on its own: GELU(−12) ≈ −2.1e-32 ≈ 0, never NaN or a large value.
    const float z = -12.0f, zero = 0.0f, one = 1.0f;
    for (const DotKernels* k : available_kernel_sets()) EXPECT_NEAR(k->gelu_dot(&z, &zero, &one, 1), 0.0f, 1e-20);
}

TEST(Kernels, SoftmaxRowsMatchFloat64ForEveryIsa) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{37}, int64_t{1000}}) {
        auto x = randn(n, 61, 4.0f);
        x[n / 2] = 30.0f;  // one dominant score, others far below it (exponent clamp region)
        double m = -1e300, sum = 0;
        for (float v : x) m = std::max(m, double(v));
        for (float v : x) sum += std::exp(double(v) - m);
        for (const DotKernels* k : available_kernel_sets()) {
            SCOPED_TRACE(testing::Message() << k->isa << " n=" << n);
            std::vector<float> y = x;
            k->softmax(y.data(), n);
            double total = 0;
            for (int64_t j = 0; j < n; ++j) {
                const double want = std::exp(double(x[j]) - m) / sum;
                // float32 s_j − max s (|.| < 64 here) carries up to 4e-6 absolute error into the exponent
                EXPECT_NEAR(y[j], want, 1e-5 * want + 1e-30);
                total += y[j];
            }
            EXPECT_NEAR(total, 1.0, 1e-5);
        }
    }
}

TEST(Kernels, PagedAttentionRowsMatchReferenceForEveryTypeAndIsa) {
    // Two pages of 16 rows then a partial one (7 rows); online softmax across pages. The shapes cover the
    // specialised binary16 AVX-512 kernel (d 64/128/256, value pass in one or several query blocks), the AVX2
    // one (d a multiple of 8, G ≤ 8) and the generic ones (d = 32 on AVX-512, G above their limits).
    for (auto [d, G] : std::vector<std::pair<int, int>>{
             {64, 4}, {128, 2}, {128, 5}, {256, 3}, {32, 4}, {64, 17}, {64, 3}, {64, 8}, {64, 9}, {64, 1}}) {
        SCOPED_TRACE(testing::Message() << "d=" << d << " G=" << G);
        const int n = 39;
        const auto kf = randn(n * d, 31), vf = randn(n * d, 32), q = randn(G * d, 33);
        std::vector<uint16_t> kh(n * d), vh(n * d), kb(n * d), vb(n * d);
        quantize_row_f16(kf.data(), kh.data(), n * d);
        quantize_row_f16(vf.data(), vh.data(), n * d);
        quantize_row_bf16(kf.data(), kb.data(), n * d);
        quantize_row_bf16(vf.data(), vb.data(), n * d);
        for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
            // Reference in float64 on the rounded values.
            std::vector<float> K(n * d), V(n * d);
            const void* kp = t == TensorType::F32   ? static_cast<const void*>(kf.data())
                             : t == TensorType::F16 ? (const void*)kh.data()
                                                    : (const void*)kb.data();
            const void* vp = t == TensorType::F32   ? static_cast<const void*>(vf.data())
                             : t == TensorType::F16 ? (const void*)vh.data()
                                                    : (const void*)vb.data();
            dequantize_row(t, kp, K.data(), n * d);
            dequantize_row(t, vp, V.data(), n * d);
            std::vector<float> ref(G * d);
            attention_reference(q.data(), 1, n - 1, K.data(), V.data(), d, {G, 1, d}, ref.data());
            const size_t es = t == TensorType::F32 ? 4 : 2;
            const KVType kt = t == TensorType::F32 ? KVType::kF32 : t == TensorType::F16 ? KVType::kF16 : KVType::kBF16;
            for (const DotKernels* k : available_kernel_sets()) {
                SCOPED_TRACE(std::string(k->isa) + " " + type_name(t));
                std::vector<float> m(G, -INFINITY), l(G, 0), o(G * d, 0), s(G * n);
                for (int j0 = 0; j0 < n; j0 += 16) {
                    const int cnt = std::min(16, n - j0);
                    kv_attend_rows(*k, kt, static_cast<const uint8_t*>(kp) + j0 * d * es, kt,
                                   static_cast<const uint8_t*>(vp) + j0 * d * es, cnt, d, q.data(), G,
                                   1.0f / std::sqrt(float(d)), m.data(), l.data(), o.data(), s.data() + j0, n);
                }
                double worst = 0, worst_s = 0;
                for (int g = 0; g < G; ++g)
                    for (int c = 0; c < d; ++c)
                        worst = std::max(worst, double(std::fabs(o[g * d + c] / l[g] - ref[g * d + c])));
                for (int g = 0; g < G; ++g)
                    for (int j = 0; j < n; ++j) {
                        double dot = 0;
                        for (int c = 0; c < d; ++c) dot += double(q[g * d + c]) * K[j * d + c];
                        worst_s = std::max(worst_s, std::fabs(dot / std::sqrt(double(d)) - s[g * n + j]));
                    }
                EXPECT_LE(worst, 1e-5);
                EXPECT_LE(worst_s, 1e-4);
            }
        }
    }
}

TEST(Kernels, AttentionMatchesReference) {
    const AttnShape s{8, 2, 32};
    for (auto [T, pos0] : std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {1, 37}, {5, 3}, {50, 10}, {300, 0}}) {
        SCOPED_TRACE(testing::Message() << "T=" << T << " pos0=" << pos0);
        const int64_t n = pos0 + T, ld = 2 * 32;
        const auto q = randn(T * 8 * 32, 21);
        const auto k = randn(n * ld, 22);
        const auto v = randn(n * ld, 23);
        std::vector<float> out(T * 8 * 32), ref(T * 8 * 32);
        attention_dense_causal(q.data(), T, pos0, k.data(), v.data(), ld, s, out.data());
        attention_reference(q.data(), T, pos0, k.data(), v.data(), ld, s, ref.data());
        double m = 0;
        for (size_t i = 0; i < out.size(); ++i) m = std::max(m, double(std::fabs(out[i] - ref[i])));
        EXPECT_LE(m, 1e-5);
    }
}

TEST(Kernels, PrefillGroupAttentionMatchesReferenceAndReportsKeyWeights) {
    // One KV head with G = 3 query heads, 5 cached keys and T = 150 new queries (two 128-query blocks).
    const int G = 3, d = 16;
    const int64_t n_prefix = 5, T = 150, n = n_prefix + T;
    const auto q = randn(T * G * d, 71), k = randn(n * d, 72), v = randn(n * d, 73);
    std::vector<float> out(T * G * d), ref(T * G * d);
    attention_reference(q.data(), T, n_prefix, k.data(), v.data(), d, {G, 1, d}, ref.data());
    for (KeyStat stat : {KeyStat::kNone, KeyStat::kSum, KeyStat::kLast}) {
        std::vector<float> st(stat == KeyStat::kNone ? 0 : G * n, -1.0f);
        attention_prefill_group(q.data(), G * d, G, d, T, k.data(), v.data(), n_prefix, out.data(), G * d, stat,
                                st.empty() ? nullptr : st.data());
        EXPECT_LE(max_abs_diff(out, std::vector<double>(ref.begin(), ref.end())), 1e-5);
        if (stat == KeyStat::kNone) continue;
        // Softmax weights in float64: query t (position n_prefix + t) sees keys 0 … n_prefix + t.
        for (int g = 0; g < G; ++g) {
            std::vector<double> want(n, 0.0);
            for (int64_t t = 0; t < T; ++t) {
                if (stat == KeyStat::kLast && t != T - 1) continue;
                const int64_t vis = n_prefix + t + 1;
                std::vector<double> s(vis);
                double mx = -1e300, sum = 0;
                for (int64_t j = 0; j < vis; ++j) {
                    for (int c = 0; c < d; ++c) s[j] += double(q[(t * G + g) * d + c]) * k[j * d + c];
                    s[j] /= std::sqrt(double(d));
                    mx = std::max(mx, s[j]);
                }
                for (auto& x : s) sum += (x = std::exp(x - mx));
                for (int64_t j = 0; j < vis; ++j) want[j] += s[j] / sum;
            }
            for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(st[g * n + j], want[j], 1e-4) << "g=" << g << " j=" << j;
        }
    }
}

TEST(Kernels, F16RowConversionMatchesTheScalarRoundingForEveryIsa) {
    // Random values over the half range, the rounding ties of each binade, subnormals, overflow and the specials,
    // in a row whose length is not a multiple of any vector width.
    std::vector<float> x;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> e(-30.0f, 17.0f);
    for (int i = 0; i < 3000; ++i)
        x.push_back((i % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f + (rng() % 1024) / 1024.0f, static_cast<int>(e(rng))));
    for (uint32_t bits : {0x3f801000u, 0x3f803000u, 0x38800000u, 0x387fe000u, 0x33000000u, 0x33000001u, 0x477fefffu,
                          0x477ff000u, 0x7f800000u, 0xff800000u, 0x80000000u, 0x00000000u, 0x7fc00000u, 0x00000001u}) {
        float f;
        std::memcpy(&f, &bits, 4);
        x.push_back(f);
    }
    x.push_back(65504.0f);
    x.push_back(-65520.0f);
    for (const DotKernels* k : available_kernel_sets()) {
        std::vector<uint16_t> got(x.size() + 1, 0xabcd);
        k->to_f16(x.data(), got.data(), static_cast<int64_t>(x.size()));
        for (size_t i = 0; i < x.size(); ++i) {
            const uint16_t want = fp32_to_fp16(x[i]);
            if (std::isnan(x[i])) {
                EXPECT_TRUE(std::isnan(fp16_to_fp32(got[i]))) << k->isa << " i=" << i;
            } else {
                EXPECT_EQ(got[i], want) << k->isa << " x=" << x[i];
            }
        }
        EXPECT_EQ(got.back(), 0xabcd) << k->isa << ": wrote past the row";
    }
}

TEST(Kernels, BlasCoreIsRaisedOnlyFromPreAvx2FallbacksToWhatTheCpuRuns) {
    CpuFeatures avx512;
    avx512.avx2 = avx512.fma = avx512.f16c = true;
    avx512.avx512f = avx512.avx512bw = avx512.avx512vl = avx512.avx512dq = true;
    CpuFeatures avx2;
    avx2.avx2 = avx2.fma = avx2.f16c = true;
    const CpuFeatures sse;  // nothing beyond SSE
    EXPECT_STREQ(blas_core_to_request(avx512, "Prescott"), "SkylakeX");
    EXPECT_STREQ(blas_core_to_request(avx512, "sandybridge"), "SkylakeX");  // OpenBLAS's names in any case
    EXPECT_STREQ(blas_core_to_request(avx2, "Prescott"), "Haswell");
    EXPECT_STREQ(blas_core_to_request(avx2, "Bulldozer"), "Haswell");
    EXPECT_EQ(blas_core_to_request(sse, "Prescott"), nullptr);    // nothing better to run
    EXPECT_EQ(blas_core_to_request(avx512, "Haswell"), nullptr);  // an AVX2 core OpenBLAS chose stays
    EXPECT_EQ(blas_core_to_request(avx512, "SkylakeX"), nullptr);
    EXPECT_EQ(blas_core_to_request(avx2, "Zen"), nullptr);
    EXPECT_EQ(blas_core_to_request(avx512, ""), nullptr);  // a library that does not say
}

TEST(Kernels, TheCliRunsOnABlasCoreTheCpuSupports) {
    // The kvsieve binary restarts itself with OPENBLAS_CORETYPE when OpenBLAS fell back to a pre-AVX2 core on a
    // CPU that runs better ones: whatever this machine is, the core `bench` reports is not one to be raised.
    // The CLI starts without the variable (this test binary may have set it for itself), as a user's shell would.
    const char* own = std::getenv("OPENBLAS_CORETYPE");
    const std::string saved = own ? own : "";
    unsetenv("OPENBLAS_CORETYPE");
    const auto r = test::run_cli("bench -m " + test::model_path("stories260K.gguf") + " -p 8 -n 2 -r 1 -t 1");
    if (own != nullptr) setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
    ASSERT_EQ(r.status, 0) << r.out;
    const size_t at = r.out.find("| BLAS ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string core = r.out.substr(at + 7, r.out.find('\n', at) - at - 7);
    EXPECT_FALSE(core.empty());
    EXPECT_EQ(blas_core_to_request(cpu_features(), core), nullptr) << core;
}

}  // namespace
}  // namespace kvsieve
