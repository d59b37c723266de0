// Decode attention over quantized KV pages (kernels/attend_quant.h): the AVX2 and AVX-512 kernels against the
// scalar reference, and the reference against a float64 computation on dequantized rows and Q8_0-rounded queries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attend_quant.h"
#include "kernels/cpu_features.h"
#include "kernels/fp16.h"
#include "kernels/quant.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

using AttendQuantFn = bool (*)(TensorType, const void*, TensorType, const void*, int, int, const float*, int, float,
                               float*, float*, float*, float*, int64_t);
using AttendQuantQ8Fn = bool (*)(TensorType, const void*, TensorType, const void*, int, int, const BlockQ8_0*, int,
                                 float, float*, float*, float*, float*, int64_t);
using QuantizeFn = void (*)(const float*, BlockQ8_0*, int64_t);

/// One instruction set's kernels, present only when this CPU runs them.
struct Isa {
    std::string name;
    AttendQuantFn attend;
    AttendQuantQ8Fn attend_q8;
    QuantizeFn quantize;
    int max_group;
};

std::vector<Isa> isas() {
    std::vector<Isa> v;
    if (cpu_features().has_avx2_set())
        v.push_back({"avx2", avx2::attend_rows_quant, avx2::attend_rows_quant_q8, avx2::quantize_queries_q8_0,
                     avx2::kMaxGroupQuantAvx2});
    if (cpu_features().has_avx512_set())
        v.push_back({"avx512", avx512::attend_rows_quant, avx512::attend_rows_quant_q8, avx512::quantize_queries_q8_0,
                     avx512::kMaxGroupQuantAvx512});
    return v;
}

using test::randn;

/// n cached rows of one KV head, keys of type kt and values of type vt (quantized from `kf` / `vf` with kvsieve's
/// quantizers), with their dequantized float copies.
struct Page {
    std::vector<uint8_t> k, v;
    std::vector<float> kd, vd;  ///< [n][d], dequantized
};

Page make_page(TensorType kt, TensorType vt, int n, int d, const std::vector<float>& kf, const std::vector<float>& vf) {
    Page p;
    p.k.resize(row_bytes(kt, d) * n);
    p.v.resize(row_bytes(vt, d) * n);
    p.kd.resize(static_cast<size_t>(n) * d);
    p.vd.resize(static_cast<size_t>(n) * d);
    for (int j = 0; j < n; ++j) {
        quantize_row(kt, kf.data() + j * d, p.k.data() + j * row_bytes(kt, d), d);
        quantize_row(vt, vf.data() + j * d, p.v.data() + j * row_bytes(vt, d), d);
        dequantize_row(kt, p.k.data() + j * row_bytes(kt, d), p.kd.data() + j * d, d);
        dequantize_row(vt, p.v.data() + j * row_bytes(vt, d), p.vd.data() + j * d, d);
    }
    return p;
}

Page random_page(TensorType kt, TensorType vt, int n, int d, std::mt19937& rng, float sd = 1.0f) {
    return make_page(kt, vt, n, d, randn(static_cast<size_t>(n) * d, rng, sd),
                     randn(static_cast<size_t>(n) * d, rng, sd));
}

/// Row stride of the kernels' score output in these tests: not the page size, so a kernel that assumed 16 would
/// write the wrong cells.
constexpr int kScoreStride = 19;

/// Running online-softmax state of G heads (m = −∞, l = 0, o = 0 before the first page) and the scores of the
/// last page.
struct State {
    std::vector<float> m, l, o, s;
    State(int G, int d) : m(G, -INFINITY), l(G, 0.0f), o(static_cast<size_t>(G) * d, 0.0f), s(G * kScoreStride, 0.0f) {}
};

/// The Q8_0 rounding of a query row, computed here on its own: per block d = max|x|/127 kept as binary16,
/// q = round-half-even(x · (1/d)) with 1/d from the unrounded d; returns d_b·q_i.
std::vector<double> q8_0_rounded(const float* x, int d) {
    std::vector<double> r(d);
    for (int b = 0; b < d / 32; ++b) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
        const float dd = amax / 127.0f;
        const float id = dd != 0 ? 1.0f / dd : 0.0f;
        const double dh = fp16_to_fp32(fp32_to_fp16(dd));
        for (int i = 0; i < 32; ++i) r[32 * b + i] = dh * std::nearbyint(x[32 * b + i] * id);
    }
    return r;
}

/// Largest |Δ| a score may show between two float32 evaluations: 2e-5 of scale·|k|·|q| (the size of the terms
/// summed; Cauchy–Schwarz bounds Σ|k_i q_i| by it) plus the score's own size.
double score_tol(const Page& p, int j, const float* q, int d, float scale, double s) {
    double kk = 0, qq = 0;
    for (int i = 0; i < d; ++i) {
        kk += double(p.kd[j * d + i]) * p.kd[j * d + i];
        qq += double(q[i]) * q[i];
    }
    return 2e-5 * (std::fabs(scale) * std::sqrt(kk * qq) * 1.01 + std::fabs(s)) + 1e-30;
}

double max_abs(const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, double(std::fabs(x)));
    return m;
}

const TensorType kKeyTypes[] = {TensorType::Q8_0, TensorType::Q4_0};
const TensorType kValueTypes[] = {TensorType::Q8_0, TensorType::Q4_0, TensorType::F16};

/// Runs `pages` through the reference and through each instruction set from the same state and compares the state
/// after every page: scores to float rounding of their terms; m likewise; l and o to the relative change that
/// score error makes in exp(s − m) (2·δs) plus float rounding, o measured against l·max|v|.
void check_kernels_against_reference(TensorType kt, TensorType vt, int G, int d, const std::vector<Page>& pages, int n,
                                     const std::vector<float>& q, float scale, bool with_scores) {
    const float sc = scale;
    for (const Isa& isa : isas()) {
        SCOPED_TRACE(isa.name + " " + type_name(kt) + "/" + type_name(vt) + " G=" + std::to_string(G) +
                     " d=" + std::to_string(d) + " n=" + std::to_string(n) + (with_scores ? " s_out" : ""));
        State ref(G, d), got(G, d);
        double vmax = 0;
        for (size_t pi = 0; pi < pages.size(); ++pi) {
            const Page& p = pages[pi];
            vmax = std::max(vmax, max_abs(p.vd));
            attend_rows_quant_reference(kt, p.k.data(), vt, p.v.data(), n, d, q.data(), G, sc, ref.m.data(),
                                        ref.l.data(), ref.o.data(), ref.s.data(), kScoreStride);
            const bool took =
                isa.attend(kt, p.k.data(), vt, p.v.data(), n, d, q.data(), G, sc, got.m.data(), got.l.data(),
                           got.o.data(), with_scores ? got.s.data() : nullptr, kScoreStride);
            if (G > isa.max_group) {
                ASSERT_FALSE(took);
                break;
            }
            ASSERT_TRUE(took);
            double ds = 0;  // largest score tolerance of this page, per head below
            for (int g = 0; g < G; ++g) {
                double dsg = 0;
                for (int j = 0; j < n; ++j) {
                    const double tol = score_tol(p, j, q.data() + g * d, d, sc, ref.s[g * kScoreStride + j]);
                    dsg = std::max(dsg, tol);
                    if (with_scores)
                        EXPECT_NEAR(got.s[g * kScoreStride + j], ref.s[g * kScoreStride + j], tol) << "page " << pi;
                }
                ds = std::max(ds, dsg);
                EXPECT_NEAR(got.m[g], ref.m[g], dsg + 1e-6 * std::fabs(ref.m[g])) << "page " << pi << " head " << g;
            }
            const double rel = 2 * ds + 1e-5;
            for (int g = 0; g < G; ++g) {
                EXPECT_NEAR(got.l[g], ref.l[g], rel * ref.l[g]) << "page " << pi << " head " << g;
                for (int c = 0; c < d; ++c)
                    ASSERT_NEAR(got.o[g * d + c], ref.o[g * d + c],
                                rel * (std::fabs(ref.o[g * d + c]) + ref.l[g] * vmax))
                        << "page " << pi << " head " << g << " column " << c;
            }
        }
    }
}

TEST(AttendQuant, KernelsMatchTheReferenceOverChainedPages) {
    if (isas().empty()) GTEST_SKIP() << "this CPU has neither the AVX2 nor the AVX-512 set";
    std::mt19937 rng(7);
    for (TensorType kt : kKeyTypes)
        for (TensorType vt : kValueTypes)
            for (int G : {1, 2, 3, 4, 8, 12})
                for (int d : {32, 64, 128})
                    for (int n : {1, 7, 16}) {
                        std::vector<Page> pages;
                        for (int pi = 0; pi < 3; ++pi) pages.push_back(random_page(kt, vt, n, d, rng));
                        const auto q = randn(static_cast<size_t>(G) * d, rng, 1.0f);
                        const float scale = 1.0f / std::sqrt(float(d));
                        check_kernels_against_reference(kt, vt, G, d, pages, n, q, scale, (G + n) % 2 == 0);
                        check_kernels_against_reference(kt, vt, G, d, pages, n, q, scale, (G + n) % 2 == 1);
                        if (HasFatalFailure()) return;
                    }
}

TEST(AttendQuant, OddBlockCountsAndTheLargestHeadSize) {
    if (isas().empty()) GTEST_SKIP() << "this CPU has neither the AVX2 nor the AVX-512 set";
    std::mt19937 rng(11);
    for (TensorType kt : kKeyTypes)
        for (TensorType vt : kValueTypes)
            for (int d : {96, 160, 256}) {
                std::vector<Page> pages;
                for (int pi = 0; pi < 2; ++pi) pages.push_back(random_page(kt, vt, 16, d, rng));
                const auto q = randn(static_cast<size_t>(3) * d, rng, 1.0f);
                check_kernels_against_reference(kt, vt, 3, d, pages, 16, q, 0.125f, true);
            }
}

/// The reference against float64 on the dequantized rows and the Q8_0-rounded query: full softmax over all the
/// pages at once (m = max s, l = Σ exp(s − m), o = Σ exp(s − m)·v), so the chaining is checked too. Scores to
/// 1e-5 of scale·Σ|q_i k_i| (float32 sums of exact block products), l and o to the relative change that makes in
/// the weights.
void check_reference_against_float(TensorType kt, TensorType vt, int G, int d, int n, const std::vector<Page>& pages,
                                   const std::vector<float>& q, float scale) {
    SCOPED_TRACE(type_name(kt) + "/" + type_name(vt) + " G=" + std::to_string(G) + " d=" + std::to_string(d) +
                 " n=" + std::to_string(n));
    State st(G, d);
    std::vector<std::vector<double>> s(G);
    double ds = 0;  // largest score tolerance: float32 rounding of the terms
    for (const Page& p : pages) {
        attend_rows_quant_reference(kt, p.k.data(), vt, p.v.data(), n, d, q.data(), G, scale, st.m.data(), st.l.data(),
                                    st.o.data(), st.s.data(), kScoreStride);
        for (int g = 0; g < G; ++g) {
            const auto qr = q8_0_rounded(q.data() + g * d, d);
            for (int j = 0; j < n; ++j) {
                double dot = 0, mag = 0;
                for (int i = 0; i < d; ++i) {
                    dot += qr[i] * p.kd[j * d + i];
                    mag += std::fabs(qr[i] * p.kd[j * d + i]);
                }
                const double want = scale * dot, tol = 1e-5 * std::fabs(scale) * mag + 1e-30;
                ds = std::max(ds, tol);
                EXPECT_NEAR(st.s[g * kScoreStride + j], want, tol) << "head " << g << " row " << j;
                s[g].push_back(want);
            }
        }
    }
    for (int g = 0; g < G; ++g) {
        const double m = *std::max_element(s[g].begin(), s[g].end());
        double l = 0;
        std::vector<double> o(d, 0.0);
        size_t r = 0;
        for (const Page& p : pages)
            for (int j = 0; j < n; ++j, ++r) {
                const double w = std::exp(s[g][r] - m);
                l += w;
                for (int c = 0; c < d; ++c) o[c] += w * p.vd[j * d + c];
            }
        double vmax = 0;
        for (const Page& p : pages) vmax = std::max(vmax, max_abs(p.vd));
        // exp(s − m) moves by a relative 2·ds when the scores move by ds.
        const double rel = 2 * ds + 1e-5;
        EXPECT_NEAR(st.m[g], m, ds) << "head " << g;
        EXPECT_NEAR(st.l[g], l, rel * l) << "head " << g;
        for (int c = 0; c < d; ++c)
            ASSERT_NEAR(st.o[g * d + c], o[c], rel * (std::fabs(o[c]) + l * vmax)) << "head " << g << " column " << c;
    }
}

TEST(AttendQuant, ReferenceMatchesFloat64OnDequantizedRows) {
    std::mt19937 rng(3);
    for (TensorType kt : kKeyTypes)
        for (TensorType vt : kValueTypes)
            for (int G : {1, 3, 8})
                for (int d : {32, 64, 128})
                    for (int n : {1, 7, 16}) {
                        std::vector<Page> pages;
                        for (int pi = 0; pi < 3; ++pi) pages.push_back(random_page(kt, vt, n, d, rng));
                        const auto q = randn(static_cast<size_t>(G) * d, rng, 1.0f);
                        check_reference_against_float(kt, vt, G, d, n, pages, q, 1.0f / std::sqrt(float(d)));
                        if (HasFatalFailure()) return;
                    }
}

TEST(AttendQuant, ZeroBlocksHugeValuesAndOneRow) {
    std::mt19937 rng(5);
    const int d = 64, G = 3;
    for (TensorType kt : kKeyTypes)
        for (TensorType vt : kValueTypes) {
            // Zero blocks: the second key block of row 2 and the first value block of row 0 are all zero (scale 0),
            // and so is the first block of query head 1.
            auto kf = randn(16 * d, rng, 1.0f), vf = randn(16 * d, rng, 1.0f);
            std::fill(kf.begin() + 2 * d + 32, kf.begin() + 3 * d, 0.0f);
            std::fill(vf.begin(), vf.begin() + 32, 0.0f);
            auto q = randn(G * d, rng, 1.0f);
            std::fill(q.begin() + d, q.begin() + d + 32, 0.0f);
            const std::vector<Page> zero{make_page(kt, vt, 16, d, kf, vf)};
            uint16_t zero_scale;
            std::memcpy(&zero_scale, zero[0].k.data() + 2 * row_bytes(kt, d) + block_bytes(kt), 2);
            EXPECT_EQ(fp16_to_fp32(zero_scale), 0.0f);
            check_reference_against_float(kt, vt, G, d, 16, zero, q, 0.125f);
            check_kernels_against_reference(kt, vt, G, d, zero, 16, q, 0.125f, true);
            // Huge values: keys and values of standard deviation 8000 (binary16 values up to about 4·10^4, below
            // its 65504), queries of 1000, scores around 10^7, so the softmax is nearly one-hot and every
            // exp(s − m) but the largest underflows.
            const std::vector<Page> huge{random_page(kt, vt, 16, d, rng, 8000.0f),
                                         random_page(kt, vt, 16, d, rng, 8000.0f)};
            const auto qh = randn(G * d, rng, 1000.0f);
            check_reference_against_float(kt, vt, G, d, 16, huge, qh, 0.125f);
            check_kernels_against_reference(kt, vt, G, d, huge, 16, qh, 0.125f, true);
            // One row per page, many pages.
            std::vector<Page> ones;
            for (int pi = 0; pi < 5; ++pi) ones.push_back(random_page(kt, vt, 1, d, rng));
            check_reference_against_float(kt, vt, G, d, 1, ones, q, 0.125f);
            check_kernels_against_reference(kt, vt, G, d, ones, 1, q, 0.125f, false);
        }
}

TEST(AttendQuant, PreQuantizedQueriesGiveTheSameResultBitForBit) {
    std::mt19937 rng(9);
    const int d = 128, G = 4, n = 16;
    for (const Isa& isa : isas()) {
        const Page p = random_page(TensorType::Q4_0, TensorType::Q8_0, n, d, rng);
        const auto q = randn(G * d, rng, 1.0f);
        std::vector<BlockQ8_0> qq(G * d / 32);
        quantize_row_q8_0_activations(q.data(), qq.data(), G * d);
        State a(G, d), b(G, d);
        ASSERT_TRUE(isa.attend(TensorType::Q4_0, p.k.data(), TensorType::Q8_0, p.v.data(), n, d, q.data(), G, 0.1f,
                               a.m.data(), a.l.data(), a.o.data(), a.s.data(), kScoreStride));
        ASSERT_TRUE(isa.attend_q8(TensorType::Q4_0, p.k.data(), TensorType::Q8_0, p.v.data(), n, d, qq.data(), G, 0.1f,
                                  b.m.data(), b.l.data(), b.o.data(), b.s.data(), kScoreStride));
        EXPECT_EQ(a.m, b.m) << isa.name;
        EXPECT_EQ(a.l, b.l) << isa.name;
        EXPECT_EQ(a.o, b.o) << isa.name;
        EXPECT_EQ(a.s, b.s) << isa.name;
    }
}

TEST(AttendQuant, VectorQueryQuantizerMatchesTheScalarOneBitForBit) {
    std::mt19937 rng(13);
    auto x = randn(32 * 40, rng, 3.0f);
    std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // a zero block (scale 0)
    // Exact ties after scaling: a block whose largest magnitude is 127 has 1/d = 1, so x.5 values are ties.
    for (int i = 0; i < 32; ++i) x[96 + i] = i == 0 ? 127.0f : float(i % 9) - 4.5f;
    x[200] = 6.0e6f;  // a block scale of 6·10^6/127 ≈ 47244, near binary16's largest (65504)
    std::vector<BlockQ8_0> want(40), got(40);
    quantize_row_q8_0_activations(x.data(), want.data(), static_cast<int64_t>(x.size()));
    for (const Isa& isa : isas()) {
        std::memset(got.data(), 0x55, got.size() * sizeof(BlockQ8_0));
        isa.quantize(x.data(), got.data(), static_cast<int64_t>(x.size()));
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(BlockQ8_0)), 0) << isa.name;
    }
}

TEST(AttendQuant, KernelsDeclineShapesTheyDoNotTakeAndTouchNothing) {
    std::mt19937 rng(17);
    const Page p = random_page(TensorType::Q8_0, TensorType::Q8_0, 16, 64, rng);
    std::vector<uint8_t> big(row_bytes(TensorType::F32, 288) * 17, 0);
    const auto q = randn(17 * 288, rng, 1.0f);
    struct Case {
        TensorType kt, vt;
        int n, d, G;
    };
    for (const Isa& isa : isas()) {
        const Case cases[] = {{TensorType::F16, TensorType::F16, 16, 64, 2},
                              {TensorType::Q8_0, TensorType::Q4_1, 16, 64, 2},
                              {TensorType::F32, TensorType::Q8_0, 16, 64, 2},
                              {TensorType::Q8_0, TensorType::Q8_0, 0, 64, 2},
                              {TensorType::Q8_0, TensorType::Q8_0, 17, 64, 2},
                              {TensorType::Q8_0, TensorType::Q8_0, 16, 48, 2},
                              {TensorType::Q8_0, TensorType::Q8_0, 16, 288, 2},
                              {TensorType::Q8_0, TensorType::Q8_0, 16, 0, 2},
                              {TensorType::Q8_0, TensorType::Q8_0, 16, 64, 0},
                              {TensorType::Q8_0, TensorType::Q8_0, 16, 64, isa.max_group + 1}};
        for (const Case& c : cases) {
            State st(17, 288);
            st.m.assign(17, 1.5f);
            st.l.assign(17, 2.5f);
            st.o.assign(st.o.size(), 3.5f);
            st.s.assign(st.s.size(), 4.5f);
            const State before = st;
            EXPECT_FALSE(isa.attend(c.kt, big.data(), c.vt, big.data(), c.n, c.d, q.data(), c.G, 1.0f, st.m.data(),
                                    st.l.data(), st.o.data(), st.s.data(), kScoreStride))
                << isa.name << " " << type_name(c.kt) << "/" << type_name(c.vt) << " n=" << c.n << " d=" << c.d
                << " G=" << c.G;
            EXPECT_EQ(st.m, before.m);
            EXPECT_EQ(st.l, before.l);
            EXPECT_EQ(st.o, before.o);
            EXPECT_EQ(st.s, before.s);
        }
    }
    (void)p;
}

TEST(AttendQuant, ReferenceRejectsTypesAndHeadSizesItDoesNotTake) {
    std::vector<uint8_t> buf(4096, 0);
    const std::vector<float> q(2 * 64, 1.0f);
    State st(2, 64);
    auto call = [&](TensorType kt, TensorType vt, int d) {
        attend_rows_quant_reference(kt, buf.data(), vt, buf.data(), 4, d, q.data(), 1, 1.0f, st.m.data(), st.l.data(),
                                    st.o.data(), nullptr, 16);
    };
    try {
        call(TensorType::F16, TensorType::Q8_0, 64);
        FAIL() << "F16 keys were taken";
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("F16 keys"), std::string::npos) << e.what(); }
    try {
        call(TensorType::Q8_0, TensorType::Q5_0, 64);
        FAIL() << "Q5_0 values were taken";
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("Q5_0 values"), std::string::npos) << e.what(); }
    try {
        call(TensorType::Q8_0, TensorType::Q8_0, 40);
        FAIL() << "d = 40 was taken";
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("not 40"), std::string::npos) << e.what(); }
}

}  // namespace
}  // namespace kvsieve
