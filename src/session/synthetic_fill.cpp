#include "session/synthetic_fill.h"

#include <vector>

#include "util/error.h"

namespace kvsieve {

void fill_synthetic(KVCache& cache, int64_t n, uint64_t seed) {
    require(cache.n_tokens() + n <= cache.n_ctx(), "synthetic fill of ", n, " tokens exceeds the context of ",
            cache.n_ctx());
    const ModelConfig& c = cache.config();
    const int d = c.head_dim;
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    auto uniform = [&state] {  // splitmix64 → uniform in [−√3, √3): unit variance, fast
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        return 1.7320508f * (2.0f * static_cast<float>(z >> 40) / 16777216.0f - 1.0f);
    };
    std::vector<float> k(d), v(d);
    for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = cache.n_tokens();
        for (int l = 0; l < c.n_layer; ++l)
            for (int h = 0; h < c.n_head_kv; ++h) {
                for (int i = 0; i < d; ++i) {
                    k[i] = uniform();
                    v[i] = uniform();
                }
                cache.append(l, h, k.data(), v.data(), static_cast<int32_t>(pos), 0.0f);
            }
        cache.finish_step(pos, 1, StepPhase::kPrefill);
    }
}

}  // namespace kvsieve
