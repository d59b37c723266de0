// pyramidkv: SnapKV scores with layer budgets that shrink linearly from the first layer to the last
// (Cai et al. 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling", §3.2,
// eq. 6–7), with kvpress PyramidKVPress's formula: max_capacity = w + n(1 − R), min = (max_capacity − w)/β,
// max = 2(max_capacity − w) − min (clipped to n − w), layer l keeps round(max − l·(max − min)/(L − 1)); when
// the pyramid does not fit, every layer keeps round(n(1 − R)). n is the number of tokens seen (kvpress q_len),
// so under chunked prefill the budgets do not compound.
#include <algorithm>
#include <cmath>
#include <memory>

#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

std::shared_ptr<Scorer> make_snapkv_scorer(int window, int kernel);

void register_pyramidkv() {
    register_preset({"pyramidkv", "pyramid layer budgets over SnapKV (Cai et al. 2024)", [](PolicyParams& p) {
                         Policy pol;
                         const int64_t w = p.get_int("window_size", 64), k = p.get_int("kernel", 5);
                         const double beta = p.get_double("beta", 20);
                         require(w > 0 && k > 0 && k % 2 == 1, "policy pyramidkv: window_size must be positive and kernel odd");
                         require(beta >= 1, "policy pyramidkv: beta must be ≥ 1");
                         pol.scorer = make_snapkv_scorer(static_cast<int>(w), static_cast<int>(k));
                         pol.compression.kind = Rule::Kind::kHeadBudget;
                         pol.compression.ratio = p.get_ratio("ratio", 0.5);
                         const double r = pol.compression.ratio;
                         pol.layer_keep = [w, beta, r](int layer, int n_layer, int64_t n) -> int64_t {
                             const double max_cap = w + n * (1 - r);
                             double min_num = (max_cap - w) / beta;
                             double max_num = (max_cap - w) * 2 - min_num;
                             if (max_num >= n - w) {
                                 max_num = static_cast<double>(n - w);
                                 min_num = (max_cap - w) * 2 - max_num;
                             }
                             if (!(n >= max_num && max_num >= min_num && min_num >= w))
                                 return std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(n * (1 - r))));
                             const double steps = n_layer > 1 ? (max_num - min_num) / (n_layer - 1) : 0.0;
                             return static_cast<int64_t>(std::nearbyint(max_num - layer * steps));
                         };
                         return pol;
                     }});
}

}  // namespace kvsieve
