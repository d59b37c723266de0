// The Hadamard rotation of stored KV entries (cache/kv_rotation.h, --kv-rotate): llama.cpp's rule for which halves
// are rotated and by which size, entries stored as R·x and read back as Rᵀ·dequant(stored) within the quantization
// error, decode attention over rotated pages equal to attention over the read-back entries, F16 caches untouched by
// auto, and saved records of another rotation refused naming both. Expectations use the explicit Sylvester matrix
// (entry (i, j) = (−1)^popcount(i AND j) / √n) in double precision and decode the stored blocks byte by byte, not
// kvsieve's transform or dequantizers.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "attend/paged_attention.h"
#include "cache/kv_cache.h"
#include "cache/kv_rotation.h"
#include "cache/page_store.h"
#include "kernels/fp16.h"
#include "kernels/quant.h"
#include "cache_record_legacy.h"
#include "kv_block_reference.h"
#include "util/binary_io.h"
#include "util/error.h"

namespace kvsieve {
namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = nd(g);
    return v;
}

/// y = diag(H_n, …, H_n)·x over d/n chunks, with the explicit normalised Sylvester matrix, in double precision.
std::vector<double> rotate_ref(const float* x, int d, int n) {
    std::vector<double> y(d, 0.0);
    if (n == 0) {
        for (int c = 0; c < d; ++c) y[c] = x[c];
        return y;
    }
    const double s = 1.0 / std::sqrt(static_cast<double>(n));
    for (int b = 0; b < d; b += n)
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < n; ++j)
                y[b + i] += ((std::popcount(static_cast<unsigned>(i & j)) & 1) ? -s : s) * x[b + j];
    return y;
}

/// A vector with one outlier channel (the case rotation is for).
std::vector<float> with_outlier(uint32_t seed, int d, int at) {
    auto x = randn(d, seed);
    x[at] = 40.0f;
    return x;
}

TEST(KVRotation, ChoosesLlamaCppsSizesPerHalfAndRefusesOnForOtherDims) {
    const KVTypes q8{KVType::kQ8_0, KVType::kQ8_0}, f16{KVType::kF16, KVType::kF16}, k8v16{KVType::kQ8_0, KVType::kF16},
        k16v4{KVType::kF16, KVType::kQ4_0};
    auto sizes = [](KVRotation r) { return std::make_pair(r.key_n(), r.value_n()); };
    // auto: keys by the largest power of two ≥ 64 dividing d, values by 64, each only for a quantized type.
    EXPECT_EQ(sizes(KVRotation::choose(KVRotateMode::kAuto, q8, 64)), std::make_pair(64, 64));
    EXPECT_EQ(sizes(KVRotation::choose(KVRotateMode::kAuto, q8, 128)), std::make_pair(128, 64));
    EXPECT_EQ(sizes(KVRotation::choose(KVRotateMode::kAuto, q8, 192)), std::make_pair(64, 64));
    EXPECT_EQ(sizes(KVRotation::choose(KVRotateMode::kAuto, q8, 256)), std::make_pair(256, 64));
    EXPECT_EQ(sizes(KVRotation::choose(KVRotateMode::kAuto, k8v16, 64)), std::make_pair(64, 0));
    EXPECT_EQ(sizes(KVRotation::choose(KVRotateMode::kAuto, k16v4, 64)), std::make_pair(0, 64));
    EXPECT_FALSE(KVRotation::choose(KVRotateMode::kAuto, f16, 64).any());
    EXPECT_FALSE(KVRotation::choose(KVRotateMode::kAuto, q8, 32).any());  // head size 32, 96: not rotatable
    EXPECT_FALSE(KVRotation::choose(KVRotateMode::kAuto, q8, 96).any());
    EXPECT_FALSE(KVRotation::choose(KVRotateMode::kOff, q8, 64).any());
    // on: both halves whatever their types.
    EXPECT_EQ(sizes(KVRotation::choose(KVRotateMode::kOn, f16, 128)), std::make_pair(128, 64));
    for (int d : {32, 96, 8}) {
        try {
            KVRotation::choose(KVRotateMode::kOn, q8, d);
            ADD_FAILURE() << "on accepted head dimension " << d;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("head dimension is " + std::to_string(d)), std::string::npos)
                << e.what();
        }
    }
    EXPECT_EQ(KVRotation::choose(KVRotateMode::kAuto, q8, 128).describe(), "keys H_128, values H_64");
    EXPECT_EQ(KVRotation().describe(), "none");
    for (const char* s : {"auto", "on", "off"}) EXPECT_EQ(kv_rotate_mode_name(parse_kv_rotate_mode(s)), s);
    try {
        parse_kv_rotate_mode("yes");
        ADD_FAILURE() << "'yes' accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'yes' is not one of auto, on, off"), std::string::npos) << e.what();
    }
    // The setting matters exactly when the mode rotates something or auto would (so that off is a choice made): for
    // every quantized type, and for F16 only under on.
    for (KVTypes t : {q8, f16, k8v16, k16v4})
        for (KVRotateMode m : {KVRotateMode::kAuto, KVRotateMode::kOn, KVRotateMode::kOff}) {
            const bool rotates = KVRotation::choose(m, t, 64).any();
            const bool auto_rotates = KVRotation::choose(KVRotateMode::kAuto, t, 64).any();
            EXPECT_EQ(kv_rotate_matters(m, t), rotates || auto_rotates)
                << kv_types_spec(t) << " " << kv_rotate_mode_name(m);
        }
    EXPECT_FALSE(kv_rotate_matters(KVRotateMode::kAuto, f16));
    EXPECT_TRUE(kv_rotate_matters(KVRotateMode::kOn, f16));
    // A pool with pages in use keeps its rotation.
    KVPool pool(64, KVType::kQ8_0);
    const int32_t p = pool.alloc();
    EXPECT_THROW(pool.set_rotation(KVRotation(64, 64, 64)), Error);
    pool.release(p);
    EXPECT_THROW(pool.set_rotation(KVRotation(128, 128, 64)), Error);  // another head dimension
}

TEST(KVRotation, StoredEntriesAreRotatedAndReadBackWithinTheQuantizationError) {
    for (int d : {64, 128}) {
        for (KVTypes t : {KVTypes{KVType::kQ8_0, KVType::kQ8_0}, KVTypes{KVType::kQ8_0, KVType::kQ4_0},
                          KVTypes{KVType::kQ4_0, KVType::kQ4_0}}) {
            SCOPED_TRACE(testing::Message() << "d=" << d << " " << kv_types_spec(t));
            auto pool = make_kv_pool(d, t, KVRotateMode::kAuto);
            ASSERT_EQ(pool->rotation().key_n(), d);  // 64 and 128 are powers of two
            ASSERT_EQ(pool->rotation().value_n(), 64);
            PageStore ps(pool.get());
            const int n = 20;
            std::vector<std::vector<float>> K, V;
            for (int i = 0; i < n; ++i) {
                K.push_back(with_outlier(100 + i, d, i % d));
                V.push_back(with_outlier(200 + i, d, (3 * i) % d));
                ps.push(K.back().data(), V.back().data(), i, 0.0f);
            }
            double err_rot = 0, err_plain = 0;  // Q4_0 value error with and without the rotation, summed
            for (int i = 0; i < n; ++i) {
                for (int half = 0; half < 2; ++half) {
                    const KVType ty = half == 0 ? t.key : t.value;
                    const int rn = half == 0 ? d : 64;
                    const std::vector<float>& x = half == 0 ? K[i] : V[i];
                    // The stored row is R·x, quantized: each element within half a step of its block (Q4_0: a whole
                    // step where the top level is clipped), plus the binary16 rounding of the stored step d (at most
                    // d·2⁻¹¹) times the level (|q| ≤ 127 or 8), plus float32 rounding of the transform.
                    std::vector<float> scale;
                    const std::vector<float> stored =
                        test::decode_block_row(ty, half == 0 ? ps.key_ptr(i) : ps.value_ptr(i), d, &scale);
                    const std::vector<double> rx = rotate_ref(x.data(), d, rn);
                    double sq = 0;
                    for (int c = 0; c < d; ++c) {
                        const double step =
                            ty == KVType::kQ8_0 ? scale[c] * (0.5 + 127.0 / 2048) : scale[c] * (1.0 + 8.0 / 2048);
                        EXPECT_LE(std::fabs(stored[c] - rx[c]), step + 1e-5) << "channel " << c;
                        sq += (stored[c] - rx[c]) * (stored[c] - rx[c]);
                    }
                    // What readers see: Rᵀ·stored, i.e. x within the same error in L2 norm (R is orthonormal).
                    std::vector<float> rk(d), rv(d);
                    ps.read(i, rk.data(), rv.data());
                    const std::vector<float>& got = half == 0 ? rk : rv;
                    const std::vector<double> back = rotate_ref(stored.data(), d, rn);
                    double sq_read = 0;
                    for (int c = 0; c < d; ++c) {
                        EXPECT_NEAR(got[c], back[c], 1e-4) << "channel " << c;
                        sq_read += (got[c] - x[c]) * (got[c] - x[c]);
                    }
                    EXPECT_LE(std::sqrt(sq_read), std::sqrt(sq) * 1.001 + 1e-4);
                    if (half == 1 && ty == KVType::kQ4_0) {
                        err_rot += std::sqrt(sq_read);
                        std::vector<float> plain(d);
                        round_trip_row(ty, x.data(), plain.data(), d);
                        double e = 0;
                        for (int c = 0; c < d; ++c) e += (plain[c] - x[c]) * (plain[c] - x[c]);
                        err_plain += std::sqrt(e);
                    }
                }
            }
            // An outlier channel costs an unrotated Q4_0 block its precision; rotated, the error is far smaller.
            if (t.value == KVType::kQ4_0) EXPECT_LT(err_rot, 0.5 * err_plain);
        }
    }
}

/// A one-layer model shape with head dimension d and a GQA group of 2.
ModelConfig shape(int d) {
    ModelConfig c;
    c.n_layer = 1;
    c.n_head = 2;
    c.n_head_kv = 1;
    c.head_dim = d;
    c.n_embd = 2 * d;
    c.n_ff = 4 * d;
    c.n_vocab = 16;
    c.n_ctx_train = 128;
    c.n_rot = d;
    return c;
}

/// Runs a prefill of T tokens then one decode step through `cache`; returns the decode step's output [2·d] and its
/// query in q.
std::vector<float> prefill_then_decode(KVCache& cache, int d, int T, std::vector<float>& q) {
    const int Hq = 2, Hkv = 1;
    auto step = [&](int64_t pos0, int64_t n, uint32_t seed, StepPhase phase) {
        std::vector<float> k = randn(static_cast<size_t>(n) * Hkv * d, seed),
                           v = randn(static_cast<size_t>(n) * Hkv * d, seed + 1);
        for (int64_t t = 0; t < n; ++t) {
            k[t * d + (t % d)] = 30.0f;  // outlier channels
            v[t * d + ((5 * t) % d)] = -25.0f;
        }
        q = randn(static_cast<size_t>(n) * Hq * d, seed + 2);
        std::vector<float> hidden(static_cast<size_t>(n) * 2 * d, 0.0f), out(static_cast<size_t>(n) * Hq * d);
        LayerInputs in;
        in.layer = 0;
        in.pos0 = pos0;
        in.T = n;
        in.n_head = Hq;
        in.n_head_kv = Hkv;
        in.head_dim = d;
        in.n_embd = 2 * d;
        in.hidden = hidden.data();
        in.q_pre = q.data();
        in.k_pre = k.data();
        in.q = q.data();
        in.k = k.data();
        in.v = v.data();
        in.phase = phase;
        PagedAttention(cache).attend(in, out.data());
        cache.finish_step(pos0, n, phase);
        return out;
    };
    step(0, T, 11, StepPhase::kPrefill);
    return step(T, 1, 21, StepPhase::kDecode);
}

TEST(KVRotation, AdmissionQuantizesTheWindowRowAsStoredWithoutRotatingItBack) {
    // Quantization at admission: the window's F16 row is already in the rotated space the global Q8_0 / Q4_0 pages
    // share with it, so the admitted row is exactly the block quantization of that F16 row (no transform back to the
    // model's space and forward again), and reading it back stays within the block's error of the entry.
    const int d = 64;
    for (KVTypes t : {KVTypes{KVType::kQ8_0, KVType::kQ8_0, KVQuantAt::kAdmission},
                      KVTypes{KVType::kQ8_0, KVType::kQ4_0, KVQuantAt::kAdmission}}) {
        SCOPED_TRACE(kv_types_spec(t));
        auto pool = make_kv_pool(d, t, KVRotateMode::kOn);
        ASSERT_TRUE(pool->two_layouts());
        ASSERT_EQ(pool->local().rotation(), pool->rotation());
        PageStore window(&pool->local()), global(pool.get());
        for (int i = 0; i < 20; ++i) {
            const std::vector<float> k = with_outlier(300 + i, d, i % d), v = with_outlier(400 + i, d, (5 * i) % d);
            window.push(k.data(), v.data(), i, 0.5f * i);
            global.push_copy(window, i);
            ASSERT_EQ(global.size(), i + 1);
            EXPECT_EQ(global.positions()[i], i);
            EXPECT_EQ(global.scores()[i], 0.5f * i);
            std::vector<float> row(d);
            std::vector<uint8_t> want_k(pool->key_row_bytes()), want_v(pool->value_row_bytes());
            load_row(pool->local().key_type(), window.key_ptr(i), row.data(), d);
            store_row(pool->key_type(), row.data(), want_k.data(), d);
            load_row(pool->local().value_type(), window.value_ptr(i), row.data(), d);
            store_row(pool->value_type(), row.data(), want_v.data(), d);
            EXPECT_EQ(std::memcmp(global.key_ptr(i), want_k.data(), want_k.size()), 0) << "key " << i;
            EXPECT_EQ(std::memcmp(global.value_ptr(i), want_v.data(), want_v.size()), 0) << "value " << i;
            std::vector<float> gk(d), gv(d);
            global.read(i, gk.data(), gv.data());
            double ek = 0, nk = 0;
            for (int c = 0; c < d; ++c) ek += (gk[c] - k[c]) * (gk[c] - k[c]), nk += k[c] * k[c];
            EXPECT_LT(std::sqrt(ek / nk), 0.02) << "key " << i << " read back";  // Q8_0: well under 1% typically
        }
    }
}

TEST(KVRotation, DecodeAttentionOverRotatedPagesEqualsAttentionOverTheReadBackEntries) {
    // The decode kernel scores R_K·q, quantized to Q8_0 as llama.cpp does, against the stored keys and rotates its
    // output back. Reference: float64 attention of the query as the kernel sees it, R_Kᵀ·deq(Q8_0(R_K·q)) (explicit
    // matrices), over the entries as PageStore::read returns them; only float32 rounding differs.
    for (int d : {64, 128}) {
        for (KVTypes t : {KVTypes{KVType::kQ8_0, KVType::kQ8_0}, KVTypes{KVType::kQ8_0, KVType::kQ4_0},
                          KVTypes{KVType::kQ4_0, KVType::kQ4_0}}) {
            SCOPED_TRACE(testing::Message() << "d=" << d << " " << kv_types_spec(t));
            KVCache cache(shape(d), 64, parse_policy("full"), make_kv_pool(d, t, KVRotateMode::kOn));
            std::vector<float> q;
            const std::vector<float> out = prefill_then_decode(cache, d, 37, q);
            const HeadCache& hc = cache.head(0, 0);
            std::vector<std::vector<float>> K, V;
            for (Region r : kRegionsInOrder)
                for (int64_t i = 0; i < hc.region(r)->size(); ++i) {
                    K.emplace_back(d);
                    V.emplace_back(d);
                    hc.region(r)->read(i, K.back().data(), V.back().data());
                }
            ASSERT_EQ(K.size(), 38u);
            double worst = 0;
            for (int g = 0; g < 2; ++g) {
                const std::vector<double> rq = rotate_ref(q.data() + g * d, d, d);
                std::vector<float> rqf(rq.begin(), rq.end()), deq(d);
                std::vector<BlockQ8_0> qb(d / 32);
                quantize_row_q8_0_activations(rqf.data(), qb.data(), d);
                dequantize_row(TensorType::Q8_0, qb.data(), deq.data(), d);
                const std::vector<double> qe = rotate_ref(deq.data(), d, d);
                std::vector<double> s(K.size());
                double m = -INFINITY, l = 0;
                for (size_t j = 0; j < K.size(); ++j) {
                    double dot = 0;
                    for (int c = 0; c < d; ++c) dot += qe[c] * K[j][c];
                    s[j] = dot / std::sqrt(static_cast<double>(d));
                    m = std::max(m, s[j]);
                }
                std::vector<double> o(d, 0.0);
                for (size_t j = 0; j < K.size(); ++j) {
                    const double p = std::exp(s[j] - m);
                    l += p;
                    for (int c = 0; c < d; ++c) o[c] += p * V[j][c];
                }
                for (int c = 0; c < d; ++c) worst = std::max(worst, std::fabs(out[g * d + c] - o[c] / l));
            }
            EXPECT_LE(worst, 1e-4);
        }
    }
}

TEST(KVRotation, AutoLeavesF16CachesUnrotatedAndBitIdentical) {
    const int d = 64;
    const KVTypes f16{KVType::kF16, KVType::kF16};
    auto a = make_kv_pool(d, f16, KVRotateMode::kAuto), o = make_kv_pool(d, f16, KVRotateMode::kOff);
    EXPECT_FALSE(a->rotation().any());
    KVCache ca(shape(d), 64, parse_policy("full"), a), co(shape(d), 64, parse_policy("full"), o);
    std::vector<float> q1, q2;
    const std::vector<float> ya = prefill_then_decode(ca, d, 21, q1), yo = prefill_then_decode(co, d, 21, q2);
    ASSERT_EQ(ya.size(), yo.size());
    EXPECT_EQ(std::memcmp(ya.data(), yo.data(), ya.size() * sizeof(float)), 0);
    // Quantized keys with F16 values: auto rotates only the keys.
    auto kq = make_kv_pool(d, {KVType::kQ8_0, KVType::kF16}, KVRotateMode::kAuto);
    EXPECT_TRUE(kq->rotation().keys());
    EXPECT_FALSE(kq->rotation().values());
}

TEST(KVRotation, SavedRecordOfAnotherRotationIsRefusedNamingBothAndVersion2ReadsAsUnrotated) {
    const int d = 64;
    const KVTypes t{KVType::kQ8_0, KVType::kQ4_0};
    KVCache rot(shape(d), 64, parse_policy("full"), make_kv_pool(d, t, KVRotateMode::kAuto));
    std::vector<float> q;
    prefill_then_decode(rot, d, 19, q);
    BinaryWriter w;
    rot.save(w);
    {
        KVCache off(shape(d), 64, parse_policy("full"), make_kv_pool(d, t, KVRotateMode::kOff));
        BinaryReader r(w.data().data(), w.data().size(), "the record");
        try {
            off.load(r);
            ADD_FAILURE() << "a rotated record loaded into an unrotated cache";
        } catch (const Error& e) {
            const std::string s = e.what();
            EXPECT_NE(s.find("stored with rotation keys H_64, values H_64; this cache stores them with rotation none"),
                      std::string::npos)
                << s;
        }
    }
    {  // the same rotation loads and reads the same entries
        KVCache same(shape(d), 64, parse_policy("full"), make_kv_pool(d, t, KVRotateMode::kOn));
        BinaryReader r(w.data().data(), w.data().size(), "the record");
        ASSERT_NO_THROW(same.load(r));
        std::vector<float> k1(d), v1(d), k2(d), v2(d);
        rot.head(0, 0).global().read(5, k1.data(), v1.data());
        same.head(0, 0).global().read(5, k2.data(), v2.data());
        EXPECT_EQ(k1, k2);
        EXPECT_EQ(v1, v2);
    }
    // A version-2 record (u32 version, int32 L, H, d, key type, value type, page: version 3 without the sinks' and the
    // window's types after the value type and the rotation sizes after the page size) holds unrotated entries: an
    // unrotated cache reads it, a rotated one names both rotations.
    KVCache plain(shape(d), 64, parse_policy("full"), make_kv_pool(d, t, KVRotateMode::kOff));
    prefill_then_decode(plain, d, 19, q);
    BinaryWriter w2;
    plain.save(w2);
    std::string v2 = test::record_as_version3(w2.data());
    const uint32_t two = 2;
    std::memcpy(v2.data(), &two, 4);
    v2.erase(4 + 8 * 4, 8);
    v2.erase(4 + 5 * 4, 8);
    {
        KVCache back(shape(d), 64, parse_policy("full"), make_kv_pool(d, t, KVRotateMode::kOff));
        BinaryReader r(v2.data(), v2.size(), "the version-2 record");
        ASSERT_NO_THROW(back.load(r));
        EXPECT_EQ(back.stats().entries, plain.stats().entries);
    }
    KVCache rotated(shape(d), 64, parse_policy("full"), make_kv_pool(d, t, KVRotateMode::kAuto));
    BinaryReader r(v2.data(), v2.size(), "the version-2 record");
    try {
        rotated.load(r);
        ADD_FAILURE() << "a version-2 record loaded into a rotated cache";
    } catch (const Error& e) {
        EXPECT_NE(
            std::string(e.what()).find("stored with rotation none; this cache stores them with rotation keys H_64, "
                                       "values H_64 (--kv-rotate)"),
            std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace kvsieve
