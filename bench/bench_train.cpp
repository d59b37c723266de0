// Forward + backward of one layer's attention in training (train/gated_attention.h): the blocked gated kernel
// against the dense autograd path (materialised [B, Hkv, G, T, T] logits), at the shapes of kvsieve-tiny-2k
// (Hkv 2, G 4, d 32) and SmolLM2-135M (Hkv 3, G 3, d 64). Peak memory is not measured here; the blocked path
// holds O(block²) per head instead of O(T²).
#include <benchmark/benchmark.h>

#include <cmath>

#include "train/gated_attention.h"

namespace {

void run(benchmark::State& st, bool blocked) {
    const int64_t T = st.range(0), H = st.range(1), G = st.range(2), d = st.range(3);
    torch::manual_seed(1);
    auto q = torch::randn({1, H, G, T, d}).requires_grad_(true);
    auto k = torch::randn({1, H, T, d}).requires_grad_(true);
    auto v = torch::randn({1, H, T, d}).requires_grad_(true);
    auto g = torch::rand({1, H, T}).requires_grad_(true);
    const kvsieve::train::GateWindow win{128, 0};
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    for (auto _ : st) {
        auto o = blocked ? kvsieve::train::gated_attention(q, k, v, g, win, scale)
                         : kvsieve::train::gated_attention_reference(q, k, v, g, win, scale);
        o.sum().backward();
        benchmark::DoNotOptimize(q.grad().data_ptr<float>());
    }
    st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(T) * st.iterations(), benchmark::Counter::kIsRate);
}

void BM_TrainAttentionBlocked(benchmark::State& st) { run(st, true); }
void BM_TrainAttentionDense(benchmark::State& st) { run(st, false); }

void shapes(benchmark::internal::Benchmark* b) {
    for (int64_t T : {512, 1024, 2048}) {
        b->Args({T, 2, 4, 32});
        b->Args({T, 3, 3, 64});
    }
    b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_TrainAttentionBlocked)->Apply(shapes);
BENCHMARK(BM_TrainAttentionDense)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
