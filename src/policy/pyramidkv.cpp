// pyramidkv: SnapKV scores with layer budgets that shrink linearly from the first layer to the last
// (Cai et al. 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling", §3.2,
// eq. 6–7): the rule pyramid_budget (policy/rule.h, pyramid_keep) with kvpress PyramidKVPress's formula. n is the
// number of tokens seen (kvpress q_len), so under chunked prefill the budgets do not compound.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "policy/policy.h"
#include "policy/snapkv.h"
#include "util/error.h"

namespace kvsieve {

std::shared_ptr<const Scorer> make_snapkv_scorer(int window, int kernel);

void register_pyramidkv() {
    register_preset({"pyramidkv", "pyramid layer budgets over SnapKV (Cai et al. 2024)",
                     merge_params(snapkv_params(), {ratio_param("ratio", "0.5", "compression ratio over all layers",
                                                                "kvpress compression_ratio"),
                                                    real_param("beta", 1, std::numeric_limits<double>::infinity(), "20",
                                                               "β: ratio of the first layer's budget to the last's",
                                                               "PyramidKV §3.2, eq. 6 (kvpress PyramidKVPress beta)")}),
                     [](PolicyParams& p) {
                         Policy pol;
                         const int64_t w = p.get_int("obs_window"), k = p.get_int("kernel");
                         const double beta = p.get_double("beta");
                         require(k % 2 == 1, "policy pyramidkv: kernel=", k, " must be odd");
                         pol.scorer = make_snapkv_scorer(static_cast<int>(w), static_cast<int>(k));
                         pol.compression.kind = Rule::Kind::kPyramidBudget;
                         pol.compression.ratio = p.get_ratio("ratio");
                         pol.compression.pyramid_window = w;
                         pol.compression.pyramid_beta = beta;
                         return pol;
                     }});
}

}  // namespace kvsieve
