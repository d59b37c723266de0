// Micro-benchmarks of the matmul kernels: GEMV (decode) bytes/s per weight type and instruction set, and
// panel-SGEMM (prefill) FLOP/s; and prefill attention of one GQA group, dense against gated (SP-KV's sparse
// prefill) at several densities; and the Walsh–Hadamard rotation of KV head vectors per instruction set. Run: build/bin/kvsieve_bench_kernels [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/hadamard.h"
#include "kernels/matmul.h"
#include "kernels/parallel.h"
#include "kernels/quant.h"
#include "io/safetensors.h"
#include "predict/wgkv_gates.h"

namespace kvsieve {
namespace {

struct Mat {
    std::vector<uint8_t> bytes;
    WeightMatrix m;
};

Mat make(TensorType t, int64_t rows, int64_t cols) {
    Mat o;
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0, 0.02f);
    std::vector<float> row(cols);
    o.m = {t, rows, cols, row_bytes(t, cols), nullptr, "bench"};
    o.bytes.resize(o.m.row_bytes * rows);
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& v : row) v = d(rng);
        quantize_row(t, row.data(), o.bytes.data() + r * o.m.row_bytes, cols);
    }
    o.m.data = o.bytes.data();
    return o;
}

// args: type, rows, cols, tokens, threads
void BM_Matmul(benchmark::State& st) {
    const auto t = static_cast<TensorType>(st.range(0));
    const int64_t rows = st.range(1), cols = st.range(2), T = st.range(3);
    set_num_threads(static_cast<int>(st.range(4)));
    const Mat W = make(t, rows, cols);
    std::vector<float> X(T * cols, 0.5f), Y(T * rows);
    for (auto _ : st) {
        matmul(W.m, X.data(), T, Y.data());
        benchmark::DoNotOptimize(Y.data());
    }
    st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(W.m.nbytes()));
    st.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * T * st.iterations(), benchmark::Counter::kIsRate,
                                                benchmark::Counter::kIs1000);
    st.SetLabel(type_name(t));
}

void args(benchmark::internal::Benchmark* b) {
    for (TensorType t : {TensorType::F16, TensorType::Q8_0, TensorType::F32, TensorType::BF16, TensorType::Q4_0})
        for (int th : {1, 2}) {
            b->Args({static_cast<int64_t>(t), 3072, 1024, 1, th});   // ffn_up of qwen3-0.6b, decode
            b->Args({static_cast<int64_t>(t), 16384, 1024, 1, th});  // a slice of the output matrix, decode
        }
    for (TensorType t : {TensorType::F16, TensorType::Q8_0}) b->Args({static_cast<int64_t>(t), 3072, 1024, 512, 2});
}
BENCHMARK(BM_Matmul)->Apply(args)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Batched decode: T sequences' rows through one weight matrix on the row-exact GEMV path (what a server step runs;
// each row's result is the one it gets alone). args: type, rows, cols, T. Two threads. Rows/s is the figure: it
// grows with T as long as the weights' unpacking is shared across rows.
void BM_MatmulBatchedDecode(benchmark::State& st) {
    const auto t = static_cast<TensorType>(st.range(0));
    const int64_t rows = st.range(1), cols = st.range(2), T = st.range(3);
    set_num_threads(2);
    const Mat W = make(t, rows, cols);
    std::vector<float> X(T * cols), Y(T * rows);
    for (size_t i = 0; i < X.size(); ++i) X[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
    for (auto _ : st) {
        matmul(W.m, X.data(), T, Y.data(), -1, MatmulPath::kRowExact);
        benchmark::DoNotOptimize(Y.data());
    }
    st.counters["rows/s"] = benchmark::Counter(static_cast<double>(T * st.iterations()), benchmark::Counter::kIsRate);
    st.SetLabel(type_name(t));
}
BENCHMARK(BM_MatmulBatchedDecode)
    ->ArgsProduct({{static_cast<int64_t>(TensorType::Q4_1), static_cast<int64_t>(TensorType::Q8_0),
                    static_cast<int64_t>(TensorType::Q4_0), static_cast<int64_t>(TensorType::Q5_K)},
                   {576},
                   {1536},
                   {1, 2, 4, 8}})  // SmolLM2-135M's ffn_down
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Prefill attention of one KV group (SmolLM2: G = 3, d = 64) over n keys. args: n, density ‰ (0: dense kernel),
// window. The gated kernel sees each query's window plus a fraction `density` of the older keys (open at random).
void BM_PrefillAttention(benchmark::State& st) {
    const int64_t n = st.range(0), density = st.range(1), window = st.range(2);
    const int G = 3, d = 64;
    std::mt19937 rng(2);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> q(static_cast<size_t>(n) * G * d), k(static_cast<size_t>(n) * d), v(k.size()), out(q.size());
    for (auto& x : q) x = nd(rng);
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    std::vector<int32_t> pos(n);
    std::vector<char> open(n);
    for (int64_t j = 0; j < n; ++j) {
        pos[j] = static_cast<int32_t>(j);
        open[j] = static_cast<int64_t>(rng() % 1000) < density;
    }
    for (auto _ : st) {
        if (density == 0)
            attention_prefill_group(q.data(), G * d, G, d, n, k.data(), v.data(), 0, out.data(), G * d, KeyStat::kNone,
                                    nullptr);
        else
            attention_prefill_gated(q.data(), G * d, G, d, n, k.data(), v.data(), 0, pos.data(), open.data(), 0, window,
                                    out.data(), G * d);
        benchmark::DoNotOptimize(out.data());
    }
    st.SetLabel(density == 0 ? "dense" : "gated density " + std::to_string(density / 10.0).substr(0, 4) + "%");
}
BENCHMARK(BM_PrefillAttention)
    ->ArgsProduct({{2048, 4096, 8192}, {0, 100, 250, 500}, {128}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// WG-KV's gates (RMSNorm of the pre/post-RoPE key, 2d → inner → 1 with an exact GELU) for T new tokens in every
// layer, SmolLM2's shape (30 layers, 3 KV heads, d = 64, inner = 256), random weights. args: T (1: a decode step).
void BM_WgkvGates(benchmark::State& st) {
    const int64_t T = st.range(0);
    const int L = 30, H = 3, d = 64, inner = 256;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0, 1);
    auto tensor = [&](std::vector<int64_t> shape, float scale) {
        SafeTensor t{"F32", shape, {}};
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        t.data.resize(static_cast<size_t>(n));
        for (auto& x : t.data) x = scale * nd(rng);
        return t;
    };
    std::map<std::string, SafeTensor> ts;
    for (int l = 0; l < L; ++l) {
        ts[wgkv_tensor_name(l, "pre_key_norm.weight")] = tensor({d}, 1);
        ts[wgkv_tensor_name(l, "post_key_norm.weight")] = tensor({d}, 1);
        ts[wgkv_tensor_name(l, "conv1.weight")] = tensor({H * inner, 2 * d, 1}, 0.1f);
        ts[wgkv_tensor_name(l, "conv1.bias")] = tensor({H * inner}, 0.1f);
        ts[wgkv_tensor_name(l, "conv2.weight")] = tensor({H, inner, 1}, 0.1f);
        ts[wgkv_tensor_name(l, "conv2.bias")] = tensor({H}, 0.1f);
    }
    const WgkvGates gates = WgkvGates::from_tensors(ts, "bench", L, H, d);
    std::vector<float> k_pre(static_cast<size_t>(T) * H * d), k_post(k_pre.size()), g(static_cast<size_t>(T) * H);
    for (auto& x : k_pre) x = nd(rng);
    for (auto& x : k_post) x = nd(rng);
    for (auto _ : st) {
        for (int l = 0; l < L; ++l) gates.predict(l, k_pre.data(), k_post.data(), T, g.data());
        benchmark::DoNotOptimize(g.data());
    }
    st.SetItemsProcessed(st.iterations() * T);
}
BENCHMARK(BM_WgkvGates)->Arg(1)->Arg(256)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The Walsh–Hadamard rotation of 64 head vectors of dimension d (one decode step's keys, queries and values of a few
// layers), per instruction set the CPU runs. args: d, set (0 scalar, 1 AVX2, 2 AVX-512).
void BM_Hadamard(benchmark::State& st) {
    const int d = static_cast<int>(st.range(0));
    const HadamardKernels* sets[] = {&hadamard_kernels_scalar(), &hadamard_kernels_avx2(), &hadamard_kernels_avx512()};
    const bool runs[] = {true, cpu_features().has_avx2_set(), cpu_features().has_avx512_set()};
    if (!runs[st.range(1)]) {
        st.SkipWithError("instruction set not supported by this CPU");
        return;
    }
    const HadamardKernels& k = *sets[st.range(1)];
    const int64_t rows = 64;
    std::mt19937 rng(2);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> x(static_cast<size_t>(rows * d));
    for (auto& v : x) v = nd(rng);
    for (auto _ : st) {
        k.rows(x.data(), rows, d, d);
        benchmark::DoNotOptimize(x.data());
    }
    st.SetItemsProcessed(st.iterations() * rows);
    st.SetBytesProcessed(st.iterations() * rows * d * static_cast<int64_t>(sizeof(float)));
    st.SetLabel(k.isa);
}
BENCHMARK(BM_Hadamard)->ArgsProduct({{64, 128}, {0, 1, 2}})->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace kvsieve

BENCHMARK_MAIN();
