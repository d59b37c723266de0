// Decode attention of one GQA group over a KV head's pages: binary16 pages (attend_f16_*) against Q8_0 and Q4_0
// pages (attend_quant.h), per instruction set, in cached rows per second. Part of kvsieve_bench_kernels:
//   build/bin/kvsieve_bench_kernels --benchmark_filter=AttendPages
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/attend_f16_avx2.h"
#include "kernels/attend_f16_avx512.h"
#include "kernels/attend_quant.h"
#include "kernels/cpu_features.h"
#include "kernels/dot.h"
#include "kernels/kv_types.h"
#include "kernels/quant.h"

namespace kvsieve {
namespace {

constexpr int kPage = 16;

// args: KV type (F16, Q8_0 or Q4_0, keys and values alike), d, G, instruction set (0: AVX2, 1: AVX-512),
// depth (rows), query quantization (0: once per step, as a caller of attend_rows_quant_q8 does; 1: per page, by
// attend_rows_quant; 2: the KV type's attend kernel of the set, kv_attend_rows, as decode attention calls it).
// One iteration is one decode step of one KV head: all its pages, its G query heads.
void BM_AttendPages(benchmark::State& st) {
    const auto t = static_cast<TensorType>(st.range(0));
    const int d = static_cast<int>(st.range(1)), G = static_cast<int>(st.range(2));
    const bool avx512 = st.range(3) == 1;
    const int depth = static_cast<int>(st.range(4)), mode = static_cast<int>(st.range(5));
    if (avx512 ? !cpu_features().has_avx512_set() : !cpu_features().has_avx2_set()) {
        st.SkipWithError("this CPU lacks the instruction set");
        return;
    }
    const int pages = depth / kPage;
    const size_t rb = row_bytes(t, d), pb = rb * kPage;
    std::mt19937 rng(4);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> row(d);
    std::vector<uint8_t> K(pb * pages), V(pb * pages);
    for (int r = 0; r < depth; ++r) {
        for (auto& x : row) x = nd(rng);
        quantize_row(t, row.data(), K.data() + r * rb, d);
        for (auto& x : row) x = nd(rng);
        quantize_row(t, row.data(), V.data() + r * rb, d);
    }
    std::vector<float> q(static_cast<size_t>(G) * d), m(G), l(G), o(static_cast<size_t>(G) * d);
    for (auto& x : q) x = nd(rng);
    std::vector<BlockQ8_0> qq(static_cast<size_t>(G) * d / QK8_0);
    const float scale = 1.0f / std::sqrt(float(d));
    const DotKernels& dk = avx512 ? dot_kernels_avx512() : dot_kernels_avx2();
    KVType kt = KVType::kF16;  // the KV type whose rows are of tensor type t
    for (const KVTypeTraits& r : kv_type_table())
        if (r.tensor == t) kt = r.type;
    for (auto _ : st) {
        std::fill(m.begin(), m.end(), -INFINITY);
        std::fill(l.begin(), l.end(), 0.0f);
        std::fill(o.begin(), o.end(), 0.0f);
        const bool quant = t != TensorType::F16;
        if (quant && mode == 0) {
            if (avx512)
                avx512::quantize_queries_q8_0(q.data(), qq.data(), static_cast<int64_t>(G) * d);
            else
                avx2::quantize_queries_q8_0(q.data(), qq.data(), static_cast<int64_t>(G) * d);
        }
        for (int p = 0; p < pages; ++p) {
            const uint8_t* k = K.data() + p * pb;
            const uint8_t* v = V.data() + p * pb;
            if (mode == 2) {
                kv_attend_rows(dk, kt, k, kt, v, kPage, d, q.data(), G, scale, m.data(), l.data(), o.data(), nullptr,
                               0);
            } else if (!quant) {
                const auto* kh = reinterpret_cast<const uint16_t*>(k);
                const auto* vh = reinterpret_cast<const uint16_t*>(v);
                if (avx512)
                    avx512::attend_rows_f16(kh, vh, kPage, d, q.data(), G, scale, m.data(), l.data(), o.data(), nullptr,
                                            0);
                else
                    avx2::attend_rows_f16(kh, vh, kPage, d, q.data(), G, scale, m.data(), l.data(), o.data(), nullptr,
                                          0);
            } else if (mode == 0) {
                if (avx512)
                    avx512::attend_rows_quant_q8(t, k, t, v, kPage, d, qq.data(), G, scale, m.data(), l.data(),
                                                 o.data(), nullptr, 0);
                else
                    avx2::attend_rows_quant_q8(t, k, t, v, kPage, d, qq.data(), G, scale, m.data(), l.data(), o.data(),
                                               nullptr, 0);
            } else {
                if (avx512)
                    avx512::attend_rows_quant(t, k, t, v, kPage, d, q.data(), G, scale, m.data(), l.data(), o.data(),
                                              nullptr, 0);
                else
                    avx2::attend_rows_quant(t, k, t, v, kPage, d, q.data(), G, scale, m.data(), l.data(), o.data(),
                                            nullptr, 0);
            }
        }
        benchmark::DoNotOptimize(o.data());
    }
    st.SetItemsProcessed(st.iterations() * depth);
    st.SetBytesProcessed(st.iterations() * static_cast<int64_t>(2 * pb * pages));
    static const char* kModes[] = {"", " query per page", " kv_attend_rows"};
    st.SetLabel(type_name(t) + (avx512 ? " avx512" : " avx2") + kModes[mode]);
}

// Depth 4096: one KV head's pages stay in the L2 cache (0.6 to 2 MiB), so the kernels' arithmetic is measured;
// depth 65536 (9 to 32 MiB, as much as a whole model's cache at a few thousand tokens) streams them from memory.
void attend_args(benchmark::internal::Benchmark* b) {
    for (int isa : {0, 1})
        for (auto [d, G] : {std::pair{64, 3}, std::pair{128, 4}}) {
            b->Args({static_cast<int64_t>(TensorType::F16), d, G, isa, 4096, 0});
            for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0})
                for (int mode : {0, 1, 2}) b->Args({static_cast<int64_t>(t), d, G, isa, 4096, mode});
            for (TensorType t : {TensorType::F16, TensorType::Q8_0, TensorType::Q4_0})
                b->Args({static_cast<int64_t>(t), d, G, isa, 65536, 0});
        }
}
BENCHMARK(BM_AttendPages)->Apply(attend_args)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvsieve
