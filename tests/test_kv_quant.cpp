// Quantized KV pages (Q8_0, Q4_0 as llama.cpp's -ctk / -ctv): row layout and round-trip error per block, zeros and
// huge values, the pool's key and value row sizes, decode attention over quantized rows against references computed
// here, and saved cache records of other key / value types refused.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

#include "attend/paged_attention.h"
#include "cache/kv_cache.h"
#include "cache/page_store.h"
#include "kernels/cpu_features.h"
#include "kernels/dot.h"
#include "kernels/fp16.h"
#include "kernels/parallel.h"
#include "kernels/quant.h"
#include "model/llama_model.h"
#include "session/synthetic_fill.h"
#include "cache_record_legacy.h"
#include "kernels/kv_types.h"
#include "kv_block_reference.h"
#include "test_util.h"
#include "util/binary_io.h"
#include "util/error.h"

namespace kvsieve {
namespace {

using test::randn;

/// Every kernel set this CPU runs (the generic attention body is compiled once per set).
std::vector<const DotKernels*> kernel_sets() {
    std::vector<const DotKernels*> v{&dot_kernels_scalar()};
    if (cpu_features().has_avx2_set()) v.push_back(&dot_kernels_avx2());
    if (cpu_features().has_avx512_set()) v.push_back(&dot_kernels_avx512());
    return v;
}

float half_round(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

TEST(KVQuant, TypesNamesAndRowBytes) {
    EXPECT_EQ(kv_row_bytes(KVType::kQ8_0, 64), 68u);  // 2 blocks of 34 bytes
    EXPECT_EQ(kv_row_bytes(KVType::kQ4_0, 64), 36u);  // 2 blocks of 18 bytes
    EXPECT_EQ(kv_row_bytes(KVType::kF16, 64), 128u);
    EXPECT_EQ(kv_row_bytes(KVType::kF32, 64), 256u);
    for (const char* s : {"f32", "f16", "bf16", "q8_0", "q4_0"}) EXPECT_EQ(kv_type_name(parse_kv_type(s)), s);
    const KVTypes t = parse_kv_types("q8_0/f16");
    EXPECT_EQ(t.key, KVType::kQ8_0);
    EXPECT_EQ(t.value, KVType::kF16);
    EXPECT_EQ(kv_types_spec(t), "q8_0/f16");
    EXPECT_EQ(kv_types_spec(parse_kv_types("q4_0")), "q4_0");
    try {
        parse_kv_type("iq4_xs");
        ADD_FAILURE() << "iq4_xs accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'iq4_xs'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl"), std::string::npos)
            << e.what();
    }
    // Keys and values of separate types: a page is 16 keys then 16 values, each in its own row size.
    KVPool pool(64, KVType::kQ8_0, KVType::kF16, 16, 1 << 20);
    EXPECT_EQ(pool.key_row_bytes(), 68u);
    EXPECT_EQ(pool.value_row_bytes(), 128u);
    EXPECT_EQ(pool.page_bytes(), 16u * (68 + 128));
    const int32_t p = pool.alloc();
    EXPECT_EQ(pool.values(p) - pool.keys(p), 16 * 68);
    EXPECT_EQ(pool.bytes_in_use(), 16u * (68 + 128));
}

TEST(KVQuant, HeadDimensionNotAMultipleOf32IsRefusedNamingTypeAndDim) {
    for (KVType t : {KVType::kQ8_0, KVType::kQ4_0}) {
        try {
            KVPool pool(48, KVType::kF16, t);
            ADD_FAILURE() << "d = 48 accepted for " << kv_type_name(t);
        } catch (const Error& e) {
            const std::string w = e.what();
            EXPECT_NE(w.find(kv_type_name(t)), std::string::npos) << w;
            EXPECT_NE(w.find("head dimension 48"), std::string::npos) << w;
        }
    }
    EXPECT_NO_THROW(KVPool(48, KVType::kF16));
}

TEST(KVQuant, RowsRoundTripWithinEachBlocksBound) {
    // Rows of 128 with blocks of very different magnitudes (scales 1e-3 .. 1e4).
    const int n = 128;
    for (KVType t : {KVType::kQ8_0, KVType::kQ4_0}) {
        SCOPED_TRACE(kv_type_name(t));
        for (uint32_t seed = 1; seed <= 20; ++seed) {
            std::vector<float> x = randn(n, seed);
            for (int b = 0; b < n / 32; ++b)
                for (int j = 0; j < 32; ++j)
                    x[b * 32 + j] *= std::pow(10.0f, static_cast<float>((seed + b) % 8) - 3.0f);
            std::vector<uint8_t> row(kv_row_bytes(t, n));
            store_row(t, x.data(), row.data(), n);
            std::vector<float> back(n);
            load_row(t, row.data(), back.data(), n);
            EXPECT_EQ(back, test::decode_block_row(t, row.data(), n))
                << "load_row is not the block format's dequantization";
            for (int b = 0; b < n / 32; ++b) {
                float amax = 0, m = 0;
                for (int j = 0; j < 32; ++j)
                    if (std::fabs(x[b * 32 + j]) > amax) amax = std::fabs(x[b * 32 + j]), m = x[b * 32 + j];
                // Q8_0: d = max|x|/127, stored as binary16; q = round(x/d), so |x − d·q| ≤ d/2, and the binary16
                // rounding of d moves d·q by at most 127·|d − d16|. Q4_0: d = m/−8; half a step except where the
                // +8 level is clipped to 7 (a whole step), and at most 8·|d − d16| from the rounding of d.
                const float d = t == KVType::kQ8_0 ? amax / 127.0f : m / -8.0f;
                const float d16 = half_round(d);
                const float bound = t == KVType::kQ8_0 ? std::fabs(d) / 2 + 127 * std::fabs(d - d16)
                                                       : std::fabs(d) + 8 * std::fabs(d - d16);
                uint16_t stored;
                std::memcpy(&stored, row.data() + b * (t == KVType::kQ8_0 ? 34 : 18), 2);
                EXPECT_EQ(fp16_to_fp32(stored), d16) << "block " << b;
                for (int j = 0; j < 32; ++j)
                    EXPECT_LE(std::fabs(x[b * 32 + j] - back[b * 32 + j]), bound * (1 + 1e-5f) + 1e-30f)
                        << "block " << b << " element " << j;
            }
        }
    }
}

TEST(KVQuant, ZerosAndHugeFiniteValuesNeverGiveNaNOrInf) {
    const int n = 64;
    for (KVType t : {KVType::kQ8_0, KVType::kQ4_0}) {
        SCOPED_TRACE(kv_type_name(t));
        std::vector<uint8_t> row(kv_row_bytes(t, n));
        std::vector<float> back(n, 1.0f);
        const std::vector<float> zeros(n, 0.0f);
        store_row(t, zeros.data(), row.data(), n);
        load_row(t, row.data(), back.data(), n);
        for (float y : back) EXPECT_EQ(y, 0.0f);
        // Huge finite values (block 0) and values just past binary16's range for the scale (block 1).
        std::vector<float> x(n);
        for (int j = 0; j < 32; ++j) x[j] = (j % 2 ? -1.0f : 1.0f) * (j % 3 ? FLT_MAX : 1e30f);
        for (int j = 32; j < 64; ++j) x[j] = (j % 2 ? -1.0f : 1.0f) * 2e7f * static_cast<float>(j - 31) / 32.0f;
        store_row(t, x.data(), row.data(), n);
        load_row(t, row.data(), back.data(), n);
        const float lim = kv_quant_limit(t);
        for (int j = 0; j < n; ++j) {
            ASSERT_TRUE(std::isfinite(back[j])) << j;
            EXPECT_LE(std::fabs(back[j]), lim) << j;
            if (std::fabs(back[j]) > 0) EXPECT_EQ(std::signbit(back[j]), std::signbit(x[j])) << j;
        }
        // The largest magnitudes come back as the limit itself.
        EXPECT_EQ(std::fabs(back[0]), lim);
    }
}

/// Float64 online-softmax attention of G queries over n rows: out[g] = Σ_j softmax(s_g)_j · V_j with
/// s_gj = Q_g · K_j · scale, and the scores themselves.
void reference_attention(const std::vector<double>& Q, const std::vector<float>& K, const std::vector<float>& V, int n,
                         int d, int G, double scale, std::vector<double>& out, std::vector<double>& s) {
    out.assign(static_cast<size_t>(G) * d, 0.0);
    s.assign(static_cast<size_t>(G) * n, 0.0);
    for (int g = 0; g < G; ++g) {
        double mx = -INFINITY;
        for (int j = 0; j < n; ++j) {
            double dot = 0;
            for (int c = 0; c < d; ++c) dot += Q[g * d + c] * K[j * d + c];
            s[g * n + j] = dot * scale;
            mx = std::max(mx, s[g * n + j]);
        }
        double sum = 0;
        for (int j = 0; j < n; ++j) sum += std::exp(s[g * n + j] - mx);
        for (int j = 0; j < n; ++j) {
            const double p = std::exp(s[g * n + j] - mx) / sum;
            for (int c = 0; c < d; ++c) out[g * d + c] += p * V[j * d + c];
        }
    }
}

TEST(KVQuant, AttendRowsOnQuantizedRowsMatchesReferences) {
    // Keys and values of every quantized / F16 pairing, on every kernel set; 39 rows as two full pages and a
    // partial one. Tight reference: float64 attention on the dequantized rows and, for quantized keys, the query as
    // the kernel scores it (quantized to Q8_0 blocks and dequantized): only float32 summation order and the
    // exponential (relative error < 2e-7) differ. Loose reference: float64 attention on the unquantized rows and
    // query; the bounds are the quantization's effect on these unit-variance rows (measured worst per output element
    // over d and the kernel sets: 0.010 with Q8_0 keys and values, 0.085 where keys or values are Q4_0), with a 3×
    // margin. (Measured tight worst: 1.3e-6 for the scores, 5e-7 for the outputs.)
    struct Pair {
        KVType k, v;
        double loose;
    };
    const Pair pairs[] = {{KVType::kQ8_0, KVType::kQ8_0, 0.03}, {KVType::kQ4_0, KVType::kQ4_0, 0.25},
                          {KVType::kQ8_0, KVType::kF16, 0.03},  {KVType::kF16, KVType::kQ4_0, 0.25},
                          {KVType::kQ4_0, KVType::kQ8_0, 0.25}, {KVType::kF16, KVType::kQ8_0, 0.03}};
    for (auto [d, G] : std::vector<std::pair<int, int>>{{32, 4}, {64, 3}, {128, 1}, {256, 2}}) {
        const int n = 39;
        const auto kf = randn(static_cast<size_t>(n) * d, 41), vf = randn(static_cast<size_t>(n) * d, 42),
                   q = randn(static_cast<size_t>(G) * d, 43);
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        for (const Pair& pr : pairs) {
            SCOPED_TRACE(testing::Message()
                         << "d=" << d << " G=" << G << " k=" << kv_type_name(pr.k) << " v=" << kv_type_name(pr.v));
            const size_t kr = kv_row_bytes(pr.k, d), vr = kv_row_bytes(pr.v, d);
            std::vector<uint8_t> kb(kr * n), vb(vr * n);
            std::vector<float> K(static_cast<size_t>(n) * d), V(static_cast<size_t>(n) * d);
            for (int j = 0; j < n; ++j) {
                store_row(pr.k, kf.data() + j * d, kb.data() + j * kr, d);
                store_row(pr.v, vf.data() + j * d, vb.data() + j * vr, d);
                load_row(pr.k, kb.data() + j * kr, K.data() + j * d, d);
                load_row(pr.v, vb.data() + j * vr, V.data() + j * d, d);
            }
            // The query as the kernel sees it: Q8_0 blocks (ties to even) for quantized keys, else as is.
            std::vector<double> Qt(q.begin(), q.end()), Qf(q.begin(), q.end());
            if (pr.k == KVType::kQ8_0 || pr.k == KVType::kQ4_0) {
                std::vector<BlockQ8_0> qq(d / 32);
                std::vector<float> qd(d);
                for (int g = 0; g < G; ++g) {
                    quantize_row_q8_0_activations(q.data() + g * d, qq.data(), d);
                    dequantize_row(TensorType::Q8_0, qq.data(), qd.data(), d);
                    for (int c = 0; c < d; ++c) Qt[g * d + c] = qd[c];
                }
            }
            std::vector<double> ref_t, s_t, ref_f, s_f;
            reference_attention(Qt, K, V, n, d, G, scale, ref_t, s_t);
            reference_attention(Qf, kf, vf, n, d, G, scale, ref_f, s_f);
            for (const DotKernels* ks : kernel_sets()) {
                SCOPED_TRACE(ks->isa);
                std::vector<float> m(G, -INFINITY), l(G, 0), o(static_cast<size_t>(G) * d, 0),
                    s(static_cast<size_t>(G) * n);
                for (int j0 = 0; j0 < n; j0 += 16)
                    kv_attend_rows(*ks, pr.k, kb.data() + j0 * kr, pr.v, vb.data() + j0 * vr, std::min(16, n - j0), d,
                                   q.data(), G, scale, m.data(), l.data(), o.data(), s.data() + j0, n);
                double worst_t = 0, worst_f = 0, worst_s = 0;
                for (int g = 0; g < G; ++g) {
                    for (int c = 0; c < d; ++c) {
                        const double y = o[g * d + c] / l[g];
                        worst_t = std::max(worst_t, std::fabs(y - ref_t[g * d + c]));
                        worst_f = std::max(worst_f, std::fabs(y - ref_f[g * d + c]));
                    }
                    for (int j = 0; j < n; ++j) worst_s = std::max(worst_s, std::fabs(s[g * n + j] - s_t[g * n + j]));
                }
                EXPECT_LE(worst_s, 1e-5);
                EXPECT_LE(worst_t, 5e-6);
                EXPECT_LE(worst_f, pr.loose);
            }
        }
    }
}

std::unique_ptr<KVCache> tiny_cache(const LlamaModel& m, KVType k, KVType v) {
    return std::make_unique<KVCache>(m.config(), 256, parse_policy("full"),
                                     std::make_shared<KVPool>(m.config().head_dim, k, v));
}

const LlamaModel& tiny2k() {
    static const LlamaModel m(test::model_path("kvsieve-tiny-2k.gguf"));
    return m;
}

TEST(KVQuant, CacheBytesAreTheQuantizedPages) {
    const LlamaModel& m = tiny2k();
    const int d = m.config().head_dim;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(10 + i);
    for (KVTypes t : {KVTypes{KVType::kQ8_0, KVType::kQ8_0}, KVTypes{KVType::kQ4_0, KVType::kQ4_0},
                      KVTypes{KVType::kQ8_0, KVType::kF16}}) {
        SCOPED_TRACE(kv_types_spec(t));
        auto cache = tiny_cache(m, t.key, t.value);
        std::vector<float> logits;
        m.forward(StepPhase::kPrefill, prompt, *cache, logits);
        // 40 entries per head: 3 pages of 16 keys and 16 values, each row 34 or 18 bytes per 32 elements (F16 2 per).
        auto row = [d](KVType ty) {
            return ty == KVType::kQ8_0 ? 34 * d / 32 : ty == KVType::kQ4_0 ? 18 * d / 32 : 2 * d;
        };
        const uint64_t pages = 3ull * m.config().n_layer * m.config().n_head_kv;
        const KVStats st = cache->stats();
        EXPECT_EQ(st.kv_bytes_final, pages * 16 * static_cast<uint64_t>(row(t.key) + row(t.value)));
        EXPECT_EQ(st.kv_bytes_full, 40ull * m.config().n_layer * m.config().n_head_kv * 2 * d * 2);
    }
}

TEST(KVQuant, CacheRecordOfOtherTypesIsRefusedNamingBothAndVersion1IsRead) {
    const LlamaModel& m = tiny2k();
    std::vector<int32_t> prompt;
    for (int i = 0; i < 20; ++i) prompt.push_back(5 + 3 * i);
    auto cache = tiny_cache(m, KVType::kQ8_0, KVType::kQ4_0);
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, prompt, *cache, logits);
    BinaryWriter w;
    cache->save(w);
    for (KVTypes other : {KVTypes{KVType::kF16, KVType::kF16}, KVTypes{KVType::kQ8_0, KVType::kQ8_0}}) {
        auto c2 = tiny_cache(m, other.key, other.value);
        BinaryReader r(w.data().data(), w.data().size(), "the record");
        try {
            c2->load(r);
            ADD_FAILURE() << "a q8_0/q4_0 record was loaded into a " << kv_types_spec(other) << " cache";
        } catch (const Error& e) {
            const std::string s = e.what();
            EXPECT_NE(s.find("keys of type q8_0 and values of type q4_0"), std::string::npos) << s;
            EXPECT_NE(s.find("keys as " + kv_type_name(other.key) + " and values as " + kv_type_name(other.value)),
                      std::string::npos)
                << s;
        }
    }
    {  // the same types load, and hold the same entries
        auto c2 = tiny_cache(m, KVType::kQ8_0, KVType::kQ4_0);
        BinaryReader r(w.data().data(), w.data().size(), "the record");
        ASSERT_NO_THROW(c2->load(r));
        EXPECT_EQ(c2->stats().entries, cache->stats().entries);
        EXPECT_EQ(c2->stats().kv_bytes_final, cache->stats().kv_bytes_final);
    }
    // A version-1 record (one type for keys and values) of an F16 cache still loads into an F16 cache: version 1
    // is version 3 without the rotation sizes after the page size, without the sinks' and the window's types and
    // without the value type after the key type (u32 version, then int32 L, H, d, type, page).
    auto f16 = tiny_cache(m, KVType::kF16, KVType::kF16);
    m.forward(StepPhase::kPrefill, prompt, *f16, logits);
    BinaryWriter w2;
    f16->save(w2);
    // Version 3 adds the value type and the sinks' and the window's key and value types after the key type, and the
    // two rotation sizes after the page size: drop them (the later first) from the record in version 3's layout.
    std::string v1 = test::record_as_version3(w2.data());
    const uint32_t one = 1;
    std::memcpy(v1.data(), &one, 4);
    v1.erase(4 + 9 * 4, 8);
    v1.erase(4 + 4 * 4, 12);
    auto back = tiny_cache(m, KVType::kF16, KVType::kF16);
    BinaryReader r1(v1.data(), v1.size(), "the version-1 record");
    ASSERT_NO_THROW(back->load(r1));
    EXPECT_EQ(back->stats().entries, f16->stats().entries);
}

TEST(KVTypeTable, EveryRowParsesBackAndSizesRowsAndUnknownTypesAreErrors) {
    std::string names;
    for (const KVTypeTraits& r : kv_type_table()) {
        SCOPED_TRACE(r.name);
        names += (names.empty() ? "" : ", ") + std::string(r.name);
        EXPECT_EQ(parse_kv_type(r.name), r.type);
        EXPECT_EQ(&kv_type_traits(r.type), &r);
        EXPECT_EQ(kv_row_bytes(r.type, 64), static_cast<size_t>(64 / r.block * r.block_bytes));
        EXPECT_EQ(kv_type_quantized(r.type), r.block > 1);
        EXPECT_EQ(row_bytes(r.tensor, 64), kv_row_bytes(r.type, 64)) << "the tensor type has another layout";
        for (const KernelIsa isa : {KernelIsa::kScalar, KernelIsa::kAvx2, KernelIsa::kAvx512})
            EXPECT_NE(r.attend[static_cast<int>(isa)], nullptr);
    }
    EXPECT_EQ(kv_type_names(), names);
    EXPECT_EQ(kernel_isa(dot_kernels_scalar()), KernelIsa::kScalar);
    EXPECT_EQ(kernel_isa(dot_kernels_avx2()), KernelIsa::kAvx2);
    EXPECT_EQ(kernel_isa(dot_kernels_avx512()), KernelIsa::kAvx512);
    // A value outside the table is an error everywhere, never read as another type.
    const auto bad = static_cast<KVType>(kv_type_table().size());
    std::vector<float> x(64, 1.0f);
    std::vector<uint8_t> row(1024);
    EXPECT_THROW(kv_type_traits(bad), Error);
    EXPECT_THROW(kv_row_bytes(bad, 64), Error);
    EXPECT_THROW(store_row(bad, x.data(), row.data(), 64), Error);
    EXPECT_THROW(load_row(bad, row.data(), x.data(), 64), Error);
    EXPECT_THROW(KVPool(64, bad), Error);
}

TEST(KVQuant, CacheRecordNamesItsTypesAndVersion3RecordsByPositionStillLoad) {
    const LlamaModel& m = tiny2k();
    std::vector<int32_t> prompt;
    for (int i = 0; i < 20; ++i) prompt.push_back(7 + 2 * i);
    auto cache = tiny_cache(m, KVType::kQ8_0, KVType::kQ4_0);
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, prompt, *cache, logits);
    BinaryWriter w;
    cache->save(w);
    const std::string v4 = w.data();
    // Version 4: u32 version, int32 L, H, d, then the four types by name (u64 length, bytes).
    uint32_t version;
    std::memcpy(&version, v4.data(), 4);
    EXPECT_EQ(version, 4u);
    BinaryReader names(v4.data() + 16, v4.size() - 16, "the record's types");
    EXPECT_EQ(names.str(), "q8_0");
    EXPECT_EQ(names.str(), "q4_0");
    EXPECT_EQ(names.str(), "q8_0");
    EXPECT_EQ(names.str(), "q4_0");
    // The same record in version 3's layout (types as int32 enum positions, q8_0 = 3, q4_0 = 4) loads, with the
    // same entries and the same bytes.
    const std::string v3 = test::record_as_version3(v4);
    int32_t pos[4];
    std::memcpy(pos, v3.data() + 16, sizeof pos);
    EXPECT_EQ(pos[0], 3);
    EXPECT_EQ(pos[1], 4);
    auto back = tiny_cache(m, KVType::kQ8_0, KVType::kQ4_0);
    BinaryReader r3(v3.data(), v3.size(), "the version-3 record");
    ASSERT_NO_THROW(back->load(r3));
    EXPECT_EQ(back->stats().entries, cache->stats().entries);
    BinaryWriter again;
    back->save(again);
    EXPECT_EQ(again.data(), v4);
    // A version-3 position outside the old enum, and a version-4 name outside the table, are refused by name.
    std::string bad3 = v3;
    const int32_t nine = 9;
    std::memcpy(bad3.data() + 20, &nine, 4);
    std::string bad4 = v4;
    bad4.replace(16 + 8 + 4 + 8, 4, "q9_9");  // the value type's name
    for (const auto& [rec, want] : {std::pair{bad3, std::string("values of type unknown type 9")},
                                    std::pair{bad4, std::string("values of type q9_9")}}) {
        auto c = tiny_cache(m, KVType::kQ8_0, KVType::kQ4_0);
        BinaryReader r(rec.data(), rec.size(), "the record");
        try {
            c->load(r);
            ADD_FAILURE() << "a record of an unknown type loaded";
        } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what(); }
    }
}

// ---- Q4_1 (llama.cpp's --cache-type-k q4_1): a row of the KV type table ----

/// The float64 reading of one stored Q4_1 row of n elements, from its bytes: per block of 32, binary16 d, binary16 m,
/// then 16 bytes with element j in the low and element j+16 in the high nibble of byte j; x = d·q + m (ggml's
/// block_q4_1). `d_out` / `m_out` receive each block's d and m.
std::vector<double> decode_q4_1_row(const uint8_t* p, int n, std::vector<double>* d_out = nullptr,
                                    std::vector<double>* m_out = nullptr, std::vector<int>* q_out = nullptr) {
    std::vector<double> y(n);
    for (int b = 0; b < n / 32; ++b) {
        const uint8_t* blk = p + b * 20;
        uint16_t dh, mh;
        std::memcpy(&dh, blk, 2);
        std::memcpy(&mh, blk + 2, 2);
        const double d = fp16_to_fp32(dh), m = fp16_to_fp32(mh);
        if (d_out) d_out->push_back(d);
        if (m_out) m_out->push_back(m);
        for (int j = 0; j < 32; ++j) {
            const uint8_t byte = blk[4 + j % 16];
            const int q = j < 16 ? (byte & 0xF) : (byte >> 4);
            if (q_out) q_out->push_back(q);
            y[b * 32 + j] = d * q + m;
        }
    }
    return y;
}

TEST(KVQuantQ4_1, IsARowOfTheTableAndTheCommandLineTakesIt) {
    const KVTypeTraits& r = kv_type_traits(KVType::kQ4_1);
    EXPECT_STREQ(r.name, "q4_1");
    EXPECT_EQ(r.block, 32);
    EXPECT_EQ(r.block_bytes, 20);
    EXPECT_EQ(r.query_dot_type, TensorType::Q8_1);
    EXPECT_EQ(parse_kv_type("q4_1"), KVType::kQ4_1);
    EXPECT_EQ(kv_row_bytes(KVType::kQ4_1, 64), 40u);
    EXPECT_EQ(kv_types_spec(parse_kv_types("q4_1/f16@admission")), "q4_1/f16@admission");
    EXPECT_EQ(kv_local_type(KVType::kQ4_1, KVQuantAt::kAdmission), KVType::kF16);
    EXPECT_THROW(KVPool(48, KVType::kQ4_1), Error);
}

TEST(KVQuantQ4_1, RowsRoundTripAsTheFloat64FormulaSays) {
    // Rows of 128 with blocks of very different magnitudes and offsets. The formula (ggml's quantize_row_q4_1_ref):
    // per block d = (max − min)/15, m = min, q = min(15, ⌊(x − min)/d + 1/2⌋), x̂ = d·q + m with d and m stored as
    // binary16; computed here in float64 from the float32 inputs.
    const int n = 128;
    for (uint32_t seed = 1; seed <= 20; ++seed) {
        std::vector<float> x = randn(n, 100 + seed);
        for (int b = 0; b < n / 32; ++b)
            for (int j = 0; j < 32; ++j)
                x[b * 32 + j] = x[b * 32 + j] * std::pow(10.0f, static_cast<float>((seed + b) % 8) - 3.0f) +
                                static_cast<float>(b % 3) * 0.5f;
        if (seed == 1) std::fill(x.begin(), x.begin() + 32, 0.0f);  // a block of zeros: d = 0, reads back 0
        std::vector<uint8_t> row(kv_row_bytes(KVType::kQ4_1, n));
        store_row(KVType::kQ4_1, x.data(), row.data(), n);
        std::vector<float> back(n);
        load_row(KVType::kQ4_1, row.data(), back.data(), n);
        std::vector<double> ds, ms;
        std::vector<int> qs;
        const std::vector<double> ref = decode_q4_1_row(row.data(), n, &ds, &ms, &qs);
        for (int i = 0; i < n; ++i) ASSERT_EQ(back[i], static_cast<float>(ref[i])) << "element " << i;
        for (int b = 0; b < n / 32; ++b) {
            SCOPED_TRACE(testing::Message() << "seed " << seed << " block " << b);
            double mn = INFINITY, mx = -INFINITY;
            for (int j = 0; j < 32; ++j)
                mn = std::min(mn, double(x[b * 32 + j])), mx = std::max(mx, double(x[b * 32 + j]));
            const double d = (mx - mn) / 15;
            EXPECT_EQ(ms[b], double(half_round(static_cast<float>(mn))));
            EXPECT_NEAR(ds[b], d, d * std::ldexp(1.0, -11) * 1.01);  // d rounded to binary16
            for (int j = 0; j < 32; ++j) {
                const double t = d > 0 ? (x[b * 32 + j] - mn) / d + 0.5 : 0.5;
                const int q = std::min(15, static_cast<int>(std::floor(t)));
                // float32 arithmetic may land on the other side of a rounding boundary it is within 1e-5 of.
                if (std::fabs(t - std::round(t)) > 1e-5 || q == 15) EXPECT_EQ(qs[b * 32 + j], q) << "element " << j;
                // |x − x̂| ≤ d/2 + 15·|d − d16| + |m − m16|
                const double bound = d / 2 + 15 * std::fabs(d - ds[b]) + std::fabs(mn - ms[b]);
                EXPECT_LE(std::fabs(x[b * 32 + j] - ref[b * 32 + j]), bound * (1 + 1e-6) + 1e-30) << "element " << j;
            }
        }
    }
    // Huge finite values are clamped to ±65504 (binary16's largest), so d and m stay finite.
    std::vector<float> huge(32, 1e30f);
    huge[0] = -1e30f;
    std::vector<uint8_t> row(20);
    store_row(KVType::kQ4_1, huge.data(), row.data(), 32);
    std::vector<float> back(32);
    load_row(KVType::kQ4_1, row.data(), back.data(), 32);
    for (float v : back) EXPECT_TRUE(std::isfinite(v)) << v;
    EXPECT_EQ(back[0], -65504.0f);
}

// ---- Q5_0 and Q5_1 (llama.cpp's --cache-type-k q5_0 / q5_1): rows of the KV type table ----

/// The float64 reading of one stored Q5_0 (t = kQ5_0) or Q5_1 row of n elements, from its bytes: per block of 32,
/// binary16 d (Q5_1: then binary16 m), the fifth bits as a little-endian 32-bit word (bit j: element j), then 16 bytes
/// with element j's low four bits in the low and element j+16's in the high nibble of byte j; Q5_0 x = d·(q − 16)
/// (22 bytes), Q5_1 x = d·q + m (24 bytes) (ggml's block_q5_0 / block_q5_1). d, m and q go to the vectors given.
std::vector<double> decode_q5_row(KVType t, const uint8_t* p, int n, std::vector<double>* d_out = nullptr,
                                  std::vector<double>* m_out = nullptr, std::vector<int>* q_out = nullptr) {
    const bool one = t == KVType::kQ5_1;
    const int bb = one ? 24 : 22;
    std::vector<double> y(n);
    for (int b = 0; b < n / 32; ++b) {
        const uint8_t* blk = p + b * bb;
        uint16_t dh, mh = 0;
        std::memcpy(&dh, blk, 2);
        if (one) std::memcpy(&mh, blk + 2, 2);
        uint32_t qh;
        std::memcpy(&qh, blk + (one ? 4 : 2), 4);
        const uint8_t* qs = blk + (one ? 8 : 6);
        const double d = fp16_to_fp32(dh), m = one ? fp16_to_fp32(mh) : 0.0;
        if (d_out) d_out->push_back(d);
        if (m_out) m_out->push_back(m);
        for (int j = 0; j < 32; ++j) {
            const int lo = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
            const int q = lo | static_cast<int>(((qh >> j) & 1u) << 4);
            if (q_out) q_out->push_back(q);
            y[b * 32 + j] = one ? d * q + m : d * (q - 16);
        }
    }
    return y;
}

TEST(KVQuantQ5, AreRowsOfTheTableAndRoundTripWithinTheirFormulasBounds) {
    EXPECT_EQ(kv_row_bytes(KVType::kQ5_0, 64), 44u);
    EXPECT_EQ(kv_row_bytes(KVType::kQ5_1, 64), 48u);
    EXPECT_EQ(parse_kv_type("q5_0"), KVType::kQ5_0);
    EXPECT_EQ(parse_kv_type("q5_1"), KVType::kQ5_1);
    EXPECT_EQ(kv_type_traits(KVType::kQ5_0).query_dot_type, TensorType::Q8_0);
    EXPECT_EQ(kv_type_traits(KVType::kQ5_1).query_dot_type, TensorType::Q8_1);
    // ggml's reference quantizers, in float64 here: Q5_0 d = a/−16 (a the signed element of largest magnitude),
    // q = min(31, ⌊x/d + 16.5⌋): |x − x̂| ≤ |d| (half a step; a whole step where +16 is clipped to 15) plus 16 times the
    // binary16 rounding of d. Q5_1 d = (max − min)/31, m = min, q = ⌊(x − min)/d + 1/2⌋: |x − x̂| ≤ d/2 + 31·|d − d16|
    // + |m − m16|.
    const int n = 128;
    for (KVType t : {KVType::kQ5_0, KVType::kQ5_1}) {
        for (uint32_t seed = 1; seed <= 20; ++seed) {
            SCOPED_TRACE(testing::Message() << kv_type_name(t) << " seed " << seed);
            std::vector<float> x = randn(n, 200 + seed);
            for (int b = 0; b < n / 32; ++b)
                for (int j = 0; j < 32; ++j)
                    x[b * 32 + j] = x[b * 32 + j] * std::pow(10.0f, static_cast<float>((seed + b) % 8) - 3.0f) +
                                    static_cast<float>(b % 3) * 0.25f;
            std::vector<uint8_t> row(kv_row_bytes(t, n));
            store_row(t, x.data(), row.data(), n);
            std::vector<float> back(n);
            load_row(t, row.data(), back.data(), n);
            std::vector<double> ds, ms;
            const std::vector<double> ref = decode_q5_row(t, row.data(), n, &ds, &ms);
            for (int i = 0; i < n; ++i) ASSERT_EQ(back[i], static_cast<float>(ref[i])) << "element " << i;
            for (int b = 0; b < n / 32; ++b) {
                double mn = INFINITY, mx = -INFINITY, a = 0;
                for (int j = 0; j < 32; ++j) {
                    const double v = x[b * 32 + j];
                    mn = std::min(mn, v), mx = std::max(mx, v);
                    if (std::fabs(v) > std::fabs(a)) a = v;
                }
                const double d = t == KVType::kQ5_0 ? a / -16 : (mx - mn) / 31;
                EXPECT_NEAR(ds[b], d, std::fabs(d) * std::ldexp(1.0, -11) * 1.01) << "block " << b;
                const double bound = t == KVType::kQ5_0 ? std::fabs(d) + 16 * std::fabs(d - ds[b])
                                                        : d / 2 + 31 * std::fabs(d - ds[b]) + std::fabs(mn - ms[b]);
                for (int j = 0; j < 32; ++j)
                    EXPECT_LE(std::fabs(x[b * 32 + j] - ref[b * 32 + j]), bound * (1 + 1e-6) + 1e-30)
                        << "block " << b << " element " << j;
            }
        }
    }
}

// ---- IQ4_NL (llama.cpp's --cache-type-k iq4_nl): a row of the KV type table ----

/// IQ4_NL's 16 levels as ggml's block_iq4_nl format defines them (kvalues_iq4nl), written out here.
constexpr int kIQ4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/// The float64 reading of one stored IQ4_NL row of n elements, from its bytes: per block of 32, binary16 d, then 16
/// bytes with element j's level index in the low and element j+16's in the high nibble of byte j; x = d·level[i].
/// d and the indices go to the vectors given.
std::vector<double> decode_iq4_nl_row(const uint8_t* p, int n, std::vector<double>* d_out = nullptr,
                                      std::vector<int>* i_out = nullptr) {
    std::vector<double> y(n);
    for (int b = 0; b < n / 32; ++b) {
        const uint8_t* blk = p + b * 18;
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const double d = fp16_to_fp32(dh);
        if (d_out) d_out->push_back(d);
        for (int j = 0; j < 32; ++j) {
            const uint8_t byte = blk[2 + j % 16];
            const int i = j < 16 ? (byte & 0xF) : (byte >> 4);
            if (i_out) i_out->push_back(i);
            y[b * 32 + j] = d * kIQ4Levels[i];
        }
    }
    return y;
}

TEST(KVQuantIQ4_NL, IsARowOfTheTableAndRoundTripsAsTheFloat64FormulaSays) {
    const KVTypeTraits& r = kv_type_traits(KVType::kIQ4_NL);
    EXPECT_STREQ(r.name, "iq4_nl");
    EXPECT_EQ(r.block, 32);
    EXPECT_EQ(r.block_bytes, 18);
    EXPECT_EQ(r.query_dot_type, TensorType::Q8_0);
    EXPECT_EQ(parse_kv_type("iq4_nl"), KVType::kIQ4_NL);
    EXPECT_EQ(kv_row_bytes(KVType::kIQ4_NL, 64), 36u);
    EXPECT_EQ(kv_types_spec(parse_kv_types("iq4_nl/q8_0")), "iq4_nl/q8_0");
    EXPECT_THROW(KVPool(48, KVType::kIQ4_NL), Error);
    // ggml's reference quantizer (quantize_row_iq4_nl_ref), in float64 here: with a the signed element of largest
    // magnitude, each element takes the level nearest x·(−127/a) (ties to the upper level), and the scale is the
    // least-squares fit of those levels weighted by x², d = Σ x²·v·x / Σ x²·v², rounded to binary16.
    const int n = 128;
    int exact_index = 0, total = 0;
    for (uint32_t seed = 1; seed <= 20; ++seed) {
        SCOPED_TRACE(testing::Message() << "seed " << seed);
        std::vector<float> x = randn(n, 300 + seed);
        for (int b = 0; b < n / 32; ++b)
            for (int j = 0; j < 32; ++j)
                x[b * 32 + j] = x[b * 32 + j] * std::pow(10.0f, static_cast<float>((seed + b) % 8) - 3.0f) +
                                static_cast<float>(b % 3) * 0.25f;
        std::vector<uint8_t> row(kv_row_bytes(KVType::kIQ4_NL, n));
        store_row(KVType::kIQ4_NL, x.data(), row.data(), n);
        std::vector<float> back(n);
        load_row(KVType::kIQ4_NL, row.data(), back.data(), n);
        std::vector<double> ds;
        std::vector<int> is;
        const std::vector<double> ref = decode_iq4_nl_row(row.data(), n, &ds, &is);
        for (int i = 0; i < n; ++i) ASSERT_EQ(back[i], static_cast<float>(ref[i])) << "element " << i;
        for (int b = 0; b < n / 32; ++b) {
            double a = 0;
            for (int j = 0; j < 32; ++j)
                if (std::fabs(x[b * 32 + j]) > std::fabs(a)) a = x[b * 32 + j];
            const double inv = -127.0 / a;
            double num = 0, den = 0;
            for (int j = 0; j < 32; ++j) {
                const double v = x[b * 32 + j] * inv;
                int best = 0;
                for (int k = 1; k < 16; ++k)
                    if (std::fabs(v - kIQ4Levels[k]) <= std::fabs(v - kIQ4Levels[best])) best = k;
                const int got = is[b * 32 + j];
                // The chosen level is the nearest (float32 arithmetic may pick the other of two levels only where
                // v lies within 1e-4 of their midpoint).
                if (got == best) {
                    ++exact_index;
                } else {
                    EXPECT_NEAR(v, (kIQ4Levels[got] + kIQ4Levels[best]) / 2.0, 1e-4) << "block " << b << " el " << j;
                }
                ++total;
                const double w = double(x[b * 32 + j]) * x[b * 32 + j], lv = kIQ4Levels[got];
                num += w * lv * x[b * 32 + j];
                den += w * lv * lv;
            }
            // binary16 rounding: half an ulp, 2^-11 relative, 2^-25 absolute among the subnormals (|d| < 2^-14); and
            // the float32 sums of the quantizer.
            const double d = num / den;
            EXPECT_NEAR(
                ds[b], d,
                std::max(std::fabs(d) * std::ldexp(1.0, -11), std::ldexp(1.0, -25)) * 1.01 + std::fabs(d) * 1e-5)
                << "block " << b;
            // The largest element is level −127 exactly.
            double amax = 0;
            int jmax = 0;
            for (int j = 0; j < 32; ++j)
                if (std::fabs(x[b * 32 + j]) > amax) amax = std::fabs(x[b * 32 + j]), jmax = j;
            EXPECT_EQ(is[b * 32 + jmax], 0) << "block " << b;
        }
    }
    EXPECT_GE(exact_index, total - 2);
    // An all-zero block stores d = 0 and comes back as zeros; huge values are clamped to the row's limit and come back
    // finite, within 7 times it (the least-squares scale is at most 7·|a|/127, see kv_types.h).
    std::vector<float> x(64, 0.0f);
    for (int j = 32; j < 64; ++j) x[j] = (j % 2 ? -1.0f : 1.0f) * (j % 3 ? FLT_MAX : 1e30f);
    std::vector<uint8_t> row(kv_row_bytes(KVType::kIQ4_NL, 64));
    store_row(KVType::kIQ4_NL, x.data(), row.data(), 64);
    std::vector<float> back(64, 1.0f);
    load_row(KVType::kIQ4_NL, row.data(), back.data(), 64);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(back[j], 0.0f) << j;
    for (int j = 32; j < 64; ++j) {
        ASSERT_TRUE(std::isfinite(back[j])) << j;
        EXPECT_LE(std::fabs(back[j]), 7 * kv_quant_limit(KVType::kIQ4_NL)) << j;
        EXPECT_EQ(std::signbit(back[j]), std::signbit(x[j])) << j;
    }
}

// ---- Attention over pages of every type pair: one table ----

/// The float64 score q·k of key row `k` (stored as kt, d elements) as the kernels compute it, from the stored blocks
/// (ggml's vec_dot of the key type against the query's activation type): Q4_1 and Q5_1 keys against the query as Q8_1
/// blocks (d_q, s_q = d_q·Σ q_i as binary16), Σ_b d_k·d_q·Σ_i k_i·q_i + m_k·s_q; Q5_0 keys Σ_b d_k·d_q·Σ_i (k_i − 16)·q_i,
/// IQ4_NL keys Σ_b d_k·d_q·Σ_i level(k_i)·q_i and Q8_0 keys Σ_b d_k·d_q·Σ_i k_i·q_i against it as Q8_0 blocks; F16
/// keys the float query against the stored row. (The binary16 rounding of s_q and d_q is the kernels', not an error.)
double tight_key_score(KVType kt, const uint8_t* k, const float* q, int d) {
    std::vector<BlockQ8_0> q8(d / 32);
    std::vector<BlockQ8_1> q81(d / 32);
    const bool q81_query = kt == KVType::kQ4_1 || kt == KVType::kQ5_1;
    if (q81_query)
        quantize_row_q8_1_activations(q, q81.data(), d);
    else
        quantize_row_q8_0_activations(q, q8.data(), d);
    std::vector<double> dk, mk;
    std::vector<int> qk;
    if (kt == KVType::kQ4_1) decode_q4_1_row(k, d, &dk, &mk, &qk);
    if (kt == KVType::kQ5_0 || kt == KVType::kQ5_1) decode_q5_row(kt, k, d, &dk, &mk, &qk);
    if (kt == KVType::kIQ4_NL) {
        decode_iq4_nl_row(k, d, &dk, &qk);
        for (int& i : qk) i = kIQ4Levels[i];
    }
    if (kt == KVType::kQ8_0)
        for (int b = 0; b < d / 32; ++b) {
            uint16_t dh;
            std::memcpy(&dh, k + b * 34, 2);
            dk.push_back(fp16_to_fp32(dh));
            for (int i = 0; i < 32; ++i) qk.push_back(static_cast<int8_t>(k[b * 34 + 2 + i]));
        }
    if (kt == KVType::kQ5_0)
        for (int& i : qk) i -= 16;
    double dot = 0;
    if (kt == KVType::kF16) {
        std::vector<float> K(d);
        load_row(kt, k, K.data(), d);
        for (int c = 0; c < d; ++c) dot += double(q[c]) * K[c];
        return dot;
    }
    for (int b = 0; b < d / 32; ++b) {
        int64_t sumi = 0;
        for (int i = 0; i < 32; ++i) sumi += int64_t{qk[b * 32 + i]} * (q81_query ? q81[b].qs[i] : q8[b].qs[i]);
        dot += q81_query ? dk[b] * fp16_to_fp32(q81[b].d) * double(sumi) + mk[b] * fp16_to_fp32(q81[b].s)
                         : dk[b] * fp16_to_fp32(q8[b].d) * double(sumi);
    }
    return dot;
}

/// One row of the table: a key and a value type, the head shapes (d, G), the seed of its random rows, and the bound
/// of the loose reference (float64 attention on the unquantized rows and query: the types' own quantization error).
struct AttendCase {
    KVType k, v;
    std::vector<std::pair<int, int>> shapes;
    unsigned seed;
    double loose;
};

TEST(KVQuantTypes, AttentionOverEveryPairOfPagesMatchesFloat64AttentionOnTheStoredRows) {
    // Q4_1, Q5_0, Q5_1 and IQ4_NL keys with their own, F16 and Q8_0 values, and F16 / Q8_0 keys with Q4_1 or IQ4_NL
    // values, on every kernel set; 39 rows as two full pages and a partial one. Tight reference in float64 from the
    // stored blocks (tight_key_score; values the dequantized rows), within float32 rounding; loose reference on the
    // unquantized rows within the types' quantization error.
    const std::vector<std::pair<int, int>> wide = {{32, 4}, {64, 3}, {128, 1}, {256, 2}},
                                           base = {{32, 4}, {64, 3}, {256, 2}};
    std::vector<AttendCase> cases = {
        {KVType::kQ4_1, KVType::kQ4_1, wide, 51, 0.25},  {KVType::kQ4_1, KVType::kF16, wide, 51, 0.25},
        {KVType::kQ4_1, KVType::kQ8_0, wide, 51, 0.25},  {KVType::kF16, KVType::kQ4_1, wide, 51, 0.25},
        {KVType::kQ8_0, KVType::kQ4_1, wide, 51, 0.25},  {KVType::kIQ4_NL, KVType::kIQ4_NL, base, 71, 0.12},
        {KVType::kIQ4_NL, KVType::kF16, base, 71, 0.12}, {KVType::kIQ4_NL, KVType::kQ8_0, base, 71, 0.12},
        {KVType::kQ8_0, KVType::kIQ4_NL, base, 71, 0.12}};
    for (KVType kt : {KVType::kQ5_0, KVType::kQ5_1})
        for (KVType vt : {kt, KVType::kF16, KVType::kQ8_0}) cases.push_back({kt, vt, base, 61, 0.12});
    for (const AttendCase& tc : cases)
        for (auto [d, G] : tc.shapes) {
            SCOPED_TRACE(testing::Message()
                         << "d=" << d << " G=" << G << " k=" << kv_type_name(tc.k) << " v=" << kv_type_name(tc.v));
            const int n = 39;
            const auto kf = randn(static_cast<size_t>(n) * d, tc.seed),
                       vf = randn(static_cast<size_t>(n) * d, tc.seed + 1),
                       q = randn(static_cast<size_t>(G) * d, tc.seed + 2);
            const double scale = 1.0 / std::sqrt(static_cast<double>(d));
            const size_t kr = kv_row_bytes(tc.k, d), vr = kv_row_bytes(tc.v, d);
            std::vector<uint8_t> kb(kr * n), vb(vr * n);
            std::vector<float> V(static_cast<size_t>(n) * d);
            for (int j = 0; j < n; ++j) {
                store_row(tc.k, kf.data() + j * d, kb.data() + j * kr, d);
                store_row(tc.v, vf.data() + j * d, vb.data() + j * vr, d);
                load_row(tc.v, vb.data() + j * vr, V.data() + j * d, d);
            }
            if (tc.v == KVType::kIQ4_NL)  // the values' dequantization is the block format's
                for (int j = 0; j < n; ++j) {
                    const std::vector<double> y = decode_iq4_nl_row(vb.data() + j * vr, d);
                    for (int c = 0; c < d; ++c) ASSERT_EQ(V[j * d + c], static_cast<float>(y[c]));
                }
            std::vector<double> s_t(static_cast<size_t>(G) * n), ref_t(static_cast<size_t>(G) * d, 0.0);
            for (int g = 0; g < G; ++g) {
                for (int j = 0; j < n; ++j)
                    s_t[g * n + j] = tight_key_score(tc.k, kb.data() + j * kr, q.data() + g * d, d) * scale;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; ++j) mx = std::max(mx, s_t[g * n + j]);
                for (int j = 0; j < n; ++j) sum += std::exp(s_t[g * n + j] - mx);
                for (int j = 0; j < n; ++j)
                    for (int c = 0; c < d; ++c) ref_t[g * d + c] += std::exp(s_t[g * n + j] - mx) / sum * V[j * d + c];
            }
            std::vector<double> ref_f, s_f, Qf(q.begin(), q.end());
            reference_attention(Qf, kf, vf, n, d, G, scale, ref_f, s_f);
            for (const DotKernels* ks : kernel_sets()) {
                SCOPED_TRACE(ks->isa);
                std::vector<float> m(G, -INFINITY), l(G, 0), o(static_cast<size_t>(G) * d, 0),
                    s(static_cast<size_t>(G) * n);
                for (int j0 = 0; j0 < n; j0 += 16)
                    kv_attend_rows(*ks, tc.k, kb.data() + j0 * kr, tc.v, vb.data() + j0 * vr, std::min(16, n - j0), d,
                                   q.data(), G, static_cast<float>(scale), m.data(), l.data(), o.data(), s.data() + j0,
                                   n);
                double worst_t = 0, worst_f = 0, worst_s = 0;
                for (int g = 0; g < G; ++g) {
                    for (int c = 0; c < d; ++c) {
                        const double y = o[g * d + c] / l[g];
                        worst_t = std::max(worst_t, std::fabs(y - ref_t[g * d + c]));
                        worst_f = std::max(worst_f, std::fabs(y - ref_f[g * d + c]));
                    }
                    for (int j = 0; j < n; ++j) worst_s = std::max(worst_s, std::fabs(s[g * n + j] - s_t[g * n + j]));
                }
                EXPECT_LE(worst_s, 1e-5);
                EXPECT_LE(worst_t, 5e-6);
                EXPECT_LE(worst_f, tc.loose);
            }
        }
}

TEST(KVQuantIQ4_NL, ASavedCacheRecordsItByNameAndLoadsBack) {
    const LlamaModel& m = tiny2k();
    std::vector<int32_t> prompt;
    for (int i = 0; i < 20; ++i) prompt.push_back(7 + 2 * i);
    auto cache = tiny_cache(m, KVType::kIQ4_NL, KVType::kIQ4_NL);
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, prompt, *cache, logits);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    BinaryWriter w;
    cache->save(w);
    const std::string rec = w.data();
    BinaryReader names(rec.data() + 16, rec.size() - 16, "the record's types");
    for (int i = 0; i < 4; ++i) EXPECT_EQ(names.str(), "iq4_nl");
    auto back = tiny_cache(m, KVType::kIQ4_NL, KVType::kIQ4_NL);
    BinaryReader r(rec.data(), rec.size(), "the record");
    ASSERT_NO_THROW(back->load(r));
    EXPECT_EQ(back->stats().entries, cache->stats().entries);
    BinaryWriter again;
    back->save(again);
    EXPECT_EQ(again.data(), rec);
    // Into a cache of another type, the record is refused naming both.
    auto other = tiny_cache(m, KVType::kQ4_0, KVType::kQ4_0);
    BinaryReader r2(rec.data(), rec.size(), "the record");
    try {
        other->load(r2);
        ADD_FAILURE() << "an iq4_nl record loaded into a q4_0 cache";
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("iq4_nl"), std::string::npos) << e.what(); }
}

// ---- Quantization at admission (mode b): sinks and window in F16, the global region quantized ----

/// The pool of mode (b) for keys of type kt and values of type vt.
std::shared_ptr<KVPool> admission_pool(int d, KVType kt, KVType vt, uint64_t budget = 0) {
    return std::make_shared<KVPool>(d, kt, vt, 16, budget, KVQuantAt::kAdmission);
}

TEST(KVQuantAtAdmission, ParsesAndNamesThePlaceAndKeepsF16Unchanged) {
    EXPECT_EQ(parse_kv_quant_at("write"), KVQuantAt::kWrite);
    EXPECT_EQ(parse_kv_quant_at("admission"), KVQuantAt::kAdmission);
    try {
        parse_kv_quant_at("later");
        ADD_FAILURE() << "'later' was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'later'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("write, admission"), std::string::npos) << e.what();
    }
    const KVTypes t = parse_kv_types("q8_0/q4_0@admission");
    EXPECT_EQ(t.key, KVType::kQ8_0);
    EXPECT_EQ(t.value, KVType::kQ4_0);
    EXPECT_EQ(t.quant_at, KVQuantAt::kAdmission);
    EXPECT_EQ(kv_types_spec(t), "q8_0/q4_0@admission");
    EXPECT_EQ(parse_kv_types("q8_0").quant_at, KVQuantAt::kWrite);
    EXPECT_EQ(kv_types_spec({KVType::kF16, KVType::kF16, KVQuantAt::kAdmission}), "f16");  // nothing to quantize
    EXPECT_THROW(parse_kv_types("q8_0@never"), Error);
    // Block types become F16 in the sinks and the window; other types stay as they are.
    EXPECT_EQ(kv_local_type(KVType::kQ8_0, KVQuantAt::kAdmission), KVType::kF16);
    EXPECT_EQ(kv_local_type(KVType::kQ4_0, KVQuantAt::kAdmission), KVType::kF16);
    EXPECT_EQ(kv_local_type(KVType::kF32, KVQuantAt::kAdmission), KVType::kF32);
    EXPECT_EQ(kv_local_type(KVType::kQ8_0, KVQuantAt::kWrite), KVType::kQ8_0);
    // F16 at admission is one layout, as at write.
    KVPool f16(64, KVType::kF16, KVType::kF16, 16, 0, KVQuantAt::kAdmission);
    EXPECT_FALSE(f16.two_layouts());
    EXPECT_EQ(&f16.local(), &f16);
    KVPool q(64, KVType::kQ8_0, KVType::kF32, 16, 0, KVQuantAt::kAdmission);
    ASSERT_TRUE(q.two_layouts());
    EXPECT_EQ(q.local().key_type(), KVType::kF16);
    EXPECT_EQ(q.local().value_type(), KVType::kF32);
}

TEST(KVQuantAtAdmission, SinksAndWindowAreBitExactF16AndAdmittedEntriesAreQuantizedThen) {
    // 2 sinks, a window of 5, 30 entries: 23 leave the window and are admitted. Every key and value is compared with
    // what it must be, computed here: binary16 rounding (fp32_to_fp16) in the sinks and the window; in the global
    // region ggml's block of the binary16-rounded row (the window's value is what is quantized at admission),
    // decoded from its bytes by the block layout (decode_row above), not by kvsieve's load_row.
    const int d = 64;
    for (KVTypes t : {KVTypes{KVType::kQ8_0, KVType::kQ8_0}, KVTypes{KVType::kQ8_0, KVType::kQ4_0},
                      KVTypes{KVType::kQ4_0, KVType::kQ4_0}}) {
        SCOPED_TRACE(kv_types_spec(t));
        auto pool = admission_pool(d, t.key, t.value);
        HeadCache hc(pool.get(), 2, 5);
        const int n = 30;
        const auto K = randn(static_cast<size_t>(n) * d, 7, 3.0f), V = randn(static_cast<size_t>(n) * d, 8, 3.0f);
        const auto keep = [](int32_t, float&, const PageStore*, int64_t) { return true; };
        for (int i = 0; i < n; ++i) hc.append(K.data() + i * d, V.data() + i * d, i, 0.0f, HeadCache::Admit(keep));
        ASSERT_EQ(hc.sinks().size(), 2);
        ASSERT_EQ(hc.window().size(), 5);
        ASSERT_EQ(hc.global().size(), n - 7);
        EXPECT_EQ(hc.sinks().pool().key_type(), KVType::kF16);
        EXPECT_EQ(hc.window().pool().value_type(), KVType::kF16);
        EXPECT_EQ(hc.global().pool().key_type(), t.key);
        EXPECT_EQ(hc.global().pool().value_type(), t.value);
        std::vector<float> k(d), v(d);
        for (const PageStore* ps : {&hc.sinks(), &hc.window()})
            for (int64_t i = 0; i < ps->size(); ++i) {
                const int p = ps->positions()[i];
                ps->read(i, k.data(), v.data());
                for (int c = 0; c < d; ++c) {
                    ASSERT_EQ(k[c], half_round(K[p * d + c])) << "position " << p;
                    ASSERT_EQ(v[c], half_round(V[p * d + c])) << "position " << p;
                }
                const auto* raw = reinterpret_cast<const uint16_t*>(ps->key_ptr(i));
                for (int c = 0; c < d; ++c) ASSERT_EQ(raw[c], fp32_to_fp16(K[p * d + c]));
            }
        double worst_k = 0, worst_v = 0;
        for (int64_t i = 0; i < hc.global().size(); ++i) {
            const int p = hc.global().positions()[i];
            std::vector<float> kh(d), vh(d);
            for (int c = 0; c < d; ++c) kh[c] = half_round(K[p * d + c]), vh[c] = half_round(V[p * d + c]);
            std::vector<uint8_t> kb(kv_row_bytes(t.key, d)), vb(kv_row_bytes(t.value, d));
            if (t.key == KVType::kQ8_0)
                quantize_row_q8_0(kh.data(), reinterpret_cast<BlockQ8_0*>(kb.data()), d);
            else
                quantize_row_q4_0(kh.data(), reinterpret_cast<BlockQ4_0*>(kb.data()), d);
            if (t.value == KVType::kQ8_0)
                quantize_row_q8_0(vh.data(), reinterpret_cast<BlockQ8_0*>(vb.data()), d);
            else
                quantize_row_q4_0(vh.data(), reinterpret_cast<BlockQ4_0*>(vb.data()), d);
            ASSERT_EQ(std::memcmp(hc.global().key_ptr(i), kb.data(), kb.size()), 0) << "position " << p;
            ASSERT_EQ(std::memcmp(hc.global().value_ptr(i), vb.data(), vb.size()), 0) << "position " << p;
            const auto kq = test::decode_block_row(t.key, hc.global().key_ptr(i), d),
                       vq = test::decode_block_row(t.value, hc.global().value_ptr(i), d);
            hc.global().read(i, k.data(), v.data());
            for (int c = 0; c < d; ++c) {
                ASSERT_EQ(k[c], kq[c]);
                ASSERT_EQ(v[c], vq[c]);
                worst_k = std::max(worst_k, static_cast<double>(std::fabs(kq[c] - K[p * d + c])));
                worst_v = std::max(worst_v, static_cast<double>(std::fabs(vq[c] - V[p * d + c])));
            }
        }
        // Quantized, not F16: a 3-sigma row of 32 loses far more than binary16's 2^-11 relative rounding.
        EXPECT_GT(worst_k, 1e-3);
        EXPECT_GT(worst_v, 1e-3);
    }
}

/// A one-layer configuration for driving attention over a KVCache directly (PagedAttention::attend): 8 query heads over 2 KV heads of d = 32.
ModelConfig small_config() {
    ModelConfig c;
    c.n_layer = 1;
    c.n_head = 8;
    c.n_head_kv = 2;
    c.head_dim = 32;
    c.n_embd = 64;
    return c;
}

TEST(KVQuantAtAdmission, BytesArePerRegionAndThePoolCoversBothLayouts) {
    const ModelConfig c = small_config();
    const int d = c.head_dim, heads = c.n_head_kv;
    // 4 sinks, a window of 16, 60 synthetic tokens: per head 1 sink page and 1 window page of F16 rows and 40 global
    // entries in 3 pages of Q8_0 keys and Q4_0 values.
    KVCache cache(c, 256, parse_policy("tova:budget=100000,window=16,sinks=4"),
                  admission_pool(d, KVType::kQ8_0, KVType::kQ4_0));
    fill_synthetic(cache, 60, 3);
    const uint64_t f16_page = 16ull * (2 * d + 2 * d), quant_page = 16ull * (34 * d / 32 + 18 * d / 32);
    const KVStats st = cache.stats();
    EXPECT_EQ(st.kv_quant_at, "admission");
    EXPECT_EQ(st.kv_type, "q8_0/q4_0");
    EXPECT_EQ(st.kv_type_local, "f16");
    EXPECT_EQ(cache.head(0, 0).global().size(), 40);
    EXPECT_EQ(st.kv_bytes_local, heads * 2 * f16_page);
    EXPECT_EQ(st.kv_bytes_global, heads * 3 * quant_page);
    EXPECT_EQ(st.kv_bytes_final, st.kv_bytes_local + st.kv_bytes_global);
    EXPECT_EQ(cache.pool().bytes_in_use(), st.kv_bytes_final);
    EXPECT_EQ(cache.pool().layout_pages_in_use(), heads * 3);
    EXPECT_EQ(cache.pool().local().layout_pages_in_use(), heads * 2);
    EXPECT_EQ(cache.pool().unit_page_bytes(), f16_page);
    EXPECT_NE(st.table().find("sinks and window f16"), std::string::npos) << st.table();
    EXPECT_EQ(st.to_json()["kv_bytes_global"], st.kv_bytes_global);
    // The full cache with a window keeps every entry in the same layout: the full-cache reference of this mode.
    KVCache full(c, 256, parse_policy("full:sinks=4,window=16"), admission_pool(d, KVType::kQ8_0, KVType::kQ4_0));
    fill_synthetic(full, 60, 3);
    EXPECT_EQ(full.head(0, 0).global().size(), 40);
    EXPECT_EQ(full.stats().kv_bytes_local, st.kv_bytes_local);
    EXPECT_EQ(full.stats().kv_bytes_global, st.kv_bytes_global);
    EXPECT_DOUBLE_EQ(full.stats().compression_ratio, 0.0);
    // At write the same entries take quantized pages everywhere.
    KVCache at_write(c, 256, parse_policy("tova:budget=100000,window=16,sinks=4"),
                     std::make_shared<KVPool>(d, KVType::kQ8_0, KVType::kQ4_0));
    fill_synthetic(at_write, 60, 3);
    EXPECT_EQ(at_write.stats().kv_bytes_final, heads * 5 * quant_page);
    EXPECT_EQ(at_write.stats().kv_quant_at, "write");
    // One budget for both layouts: room for exactly 2 F16 pages (sinks, window) and 1 quantized page (global) per
    // head; the next admitted entry needs a second global page and fails.
    const uint64_t budget = heads * 2 * f16_page + 2 * quant_page;
    KVCache tight(c, 256, parse_policy("tova:budget=100000,window=16,sinks=4"),
                  admission_pool(d, KVType::kQ8_0, KVType::kQ4_0, budget));
    EXPECT_NO_THROW(fill_synthetic(tight, 4 + 16 + 16, 3));  // sinks, window and one global page per head
    EXPECT_EQ(tight.pool().bytes_in_use(), budget);
    EXPECT_THROW(fill_synthetic(tight, 1, 4), KVPoolExhausted);
}

TEST(KVQuantAtAdmission, DecodeOverMixedRegionsEqualsAFloatReferenceOnTheStoredValues) {
    // A prefill of 400 tokens and one decode step; per KV head 4 sinks and 16 window entries in F16 and 381 global
    // entries in Q8_0 keys and Q4_0 values: 26 pages, so two flash-decoding spans of 16 pages, the first holding pages
    // of both layouts, whose softmax states merge (at 2 and 5 threads). Reference: float64 softmax
    // attention over the values every region stores (PageStore::read), scoring the global region's quantized keys
    // with the query as the kernel quantizes it (Q8_0 blocks), and the F16 keys with the query as is.
    const ModelConfig c = small_config();
    const int d = c.head_dim, Hkv = c.n_head_kv, Hq = c.n_head, G = Hq / Hkv, T = 400;
    for (int threads : {2, 5}) {
        SCOPED_TRACE(testing::Message() << "threads " << threads);
        set_num_threads(threads);
        KVCache cache(c, 512, parse_policy("tova:budget=100000,window=16,sinks=4"),
                      admission_pool(d, KVType::kQ8_0, KVType::kQ4_0));
        const auto q = randn(static_cast<size_t>(T) * Hq * d, 11), k = randn(static_cast<size_t>(T) * Hkv * d, 12),
                   v = randn(static_cast<size_t>(T) * Hkv * d, 13);
        std::vector<float> hidden(static_cast<size_t>(T) * c.n_embd), out(static_cast<size_t>(T) * Hq * d);
        LayerInputs in;
        in.n_head = Hq;
        in.n_head_kv = Hkv;
        in.head_dim = d;
        in.n_embd = c.n_embd;
        in.T = T;
        in.q = in.q_pre = q.data();
        in.k = in.k_pre = k.data();
        in.v = v.data();
        in.hidden = hidden.data();
        in.phase = StepPhase::kPrefill;
        PagedAttention(cache).attend(in, out.data());
        cache.finish_step(0, T, StepPhase::kPrefill);
        cache.end_prefill();
        const auto q1 = randn(static_cast<size_t>(Hq) * d, 21), k1 = randn(static_cast<size_t>(Hkv) * d, 22),
                   v1 = randn(static_cast<size_t>(Hkv) * d, 23);
        std::vector<float> o1(static_cast<size_t>(Hq) * d);
        const LayerInputs one = test::decode_step_after(in, T, q1.data(), k1.data(), v1.data());
        PagedAttention(cache).attend(one, o1.data());
        double worst = 0;
        for (int h = 0; h < Hkv; ++h) {
            const HeadCache& hc = cache.head(0, h);
            ASSERT_EQ(hc.global().size(), T + 1 - 20);
            for (int g = 0; g < G; ++g) {
                const float* qg = q1.data() + (h * G + g) * d;
                std::vector<BlockQ8_0> qq(d / 32);
                std::vector<float> qd(d);
                quantize_row_q8_0_activations(qg, qq.data(), d);
                dequantize_row(TensorType::Q8_0, qq.data(), qd.data(), d);
                std::vector<double> s;
                std::vector<std::vector<float>> vals;
                std::vector<float> kr(d), vr(d);
                for (Region r : kRegionsInOrder) {
                    const PageStore* ps = hc.region(r);
                    const bool quant = kv_type_block(ps->pool().key_type()) > 1;
                    EXPECT_EQ(quant, r == Region::kGlobal);
                    for (int64_t i = 0; i < ps->size(); ++i) {
                        ps->read(i, kr.data(), vr.data());
                        double dot = 0;
                        for (int e = 0; e < d; ++e) dot += static_cast<double>(quant ? qd[e] : qg[e]) * kr[e];
                        s.push_back(dot / std::sqrt(static_cast<double>(d)));
                        vals.push_back(vr);
                    }
                }
                const double mx = *std::max_element(s.begin(), s.end());
                double sum = 0;
                for (double x : s) sum += std::exp(x - mx);
                for (int e = 0; e < d; ++e) {
                    double ref = 0;
                    for (size_t j = 0; j < s.size(); ++j) ref += std::exp(s[j] - mx) / sum * vals[j][e];
                    worst = std::max(worst, std::fabs(ref - o1[(h * G + g) * d + e]));
                }
            }
        }
        EXPECT_LE(worst, 5e-6);
    }
    set_num_threads(2);
}

TEST(KVQuantAtAdmission, SaveLoadRoundTripsAndRecordsOfOtherRegionTypesAreRefusedNamingBoth) {
    const ModelConfig c = small_config();
    const int d = c.head_dim;
    const std::string spec = "tova:budget=100000,window=16,sinks=4";
    auto make = [&](KVQuantAt at) {
        return std::make_unique<KVCache>(c, 256, parse_policy(spec),
                                         std::make_shared<KVPool>(d, KVType::kQ8_0, KVType::kQ4_0, 16, 0, at));
    };
    auto b = make(KVQuantAt::kAdmission);
    fill_synthetic(*b, 70, 9);
    BinaryWriter w;
    b->save(w);
    {  // the same types and place load, and hold the same bytes
        auto back = make(KVQuantAt::kAdmission);
        BinaryReader r(w.data().data(), w.data().size(), "the record");
        ASSERT_NO_THROW(back->load(r));
        EXPECT_EQ(back->stats().entries, b->stats().entries);
        EXPECT_EQ(back->stats().kv_bytes_local, b->stats().kv_bytes_local);
        EXPECT_EQ(back->stats().kv_bytes_global, b->stats().kv_bytes_global);
        for (int h = 0; h < c.n_head_kv; ++h)
            for (Region r : kRegionsInOrder) {
                const PageStore &x = *b->head(0, h).region(r), &y = *back->head(0, h).region(r);
                ASSERT_EQ(x.size(), y.size());
                for (int64_t i = 0; i < x.size(); ++i) {
                    EXPECT_EQ(std::memcmp(x.key_ptr(i), y.key_ptr(i), x.pool().key_row_bytes()), 0);
                    EXPECT_EQ(std::memcmp(x.value_ptr(i), y.value_ptr(i), x.pool().value_row_bytes()), 0);
                    EXPECT_EQ(x.positions()[i], y.positions()[i]);
                }
            }
    }
    {  // a mode (b) record into a cache quantized at write: refused, naming both
        auto a = make(KVQuantAt::kWrite);
        BinaryReader r(w.data().data(), w.data().size(), "the record");
        try {
            a->load(r);
            ADD_FAILURE() << "a record quantized at admission loaded into a cache quantized at write";
        } catch (const Error& e) {
            const std::string m = e.what();
            EXPECT_NE(
                m.find("holds keys of type q8_0 and values of type q4_0 (sinks and window: keys f16, values f16)"),
                std::string::npos)
                << m;
            EXPECT_NE(m.find("; this cache stores keys as q8_0 and values as q4_0 (--cache-type-k"), std::string::npos)
                << m;
        }
        EXPECT_EQ(a->n_tokens(), 0);
    }
    // A version-2 record (before the sinks' and the window's types and the rotation sizes) reads as quantized at
    // write: it loads into a cache quantized at write and is refused by one quantized at admission.
    auto a = make(KVQuantAt::kWrite);
    fill_synthetic(*a, 70, 9);
    BinaryWriter wa;
    a->save(wa);
    std::string v2 = test::record_as_version3(wa.data());
    const uint32_t two = 2;
    std::memcpy(v2.data(), &two, 4);
    v2.erase(4 + 8 * 4, 8);
    v2.erase(4 + 5 * 4, 8);
    {
        auto back = make(KVQuantAt::kWrite);
        BinaryReader r(v2.data(), v2.size(), "the version-2 record");
        ASSERT_NO_THROW(back->load(r));
        EXPECT_EQ(back->stats().entries, a->stats().entries);
        EXPECT_EQ(back->stats().kv_bytes_final, a->stats().kv_bytes_final);
    }
    {
        auto back = make(KVQuantAt::kAdmission);
        BinaryReader r(v2.data(), v2.size(), "the version-2 record");
        EXPECT_THROW(back->load(r), Error);
    }
}

}  // namespace
}  // namespace kvsieve
