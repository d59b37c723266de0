// quest: read-time page selection by an upper bound on the attention logits (Tang et al. 2024, "Quest:
// Query-Aware Sparsity for Efficient Long-Context LLM Inference"). Per KV head, the cache's 16-token pages carry
// per-channel minimum and maximum keys; at each decode step the global-region pages with the highest bound
// Σ_c max(q_c·min_c, q_c·max_c) are read, `budget` tokens of them, besides the sinks, the local window and the page of
// the current token; the first two layers read everything (the paper's choice). Prefill is as the policy's. The bounds
// are kept beside the pages (PageStore::key_bounds: float32, extended on appends, recomputed for a page an eviction
// changed), so a page left out has neither its keys nor its values read. Composes with any cache policy:
//   quest:budget=512[,page=16][,skip_layers=2]            (the full cache, read sparsely)
//   wgkv:model=DIR+quest:budget=512                        (WG-KV's cache, read sparsely: the paper's Fig. 9)
#include <algorithm>
#include <numeric>

#include "policy/policy.h"
#include "policy/selection.h"
#include "util/error.h"

namespace kvsieve {

std::string Selection::describe() const {
    if (!active()) return "";
    return kind + "(budget=" + std::to_string(budget) + ",page=" + std::to_string(page) +
           ",skip_layers=" + std::to_string(skip_layers) + ")";
}

std::vector<int> quest_choose_pages(const float* q, int G, int d, const float* kmin, const float* kmax, int n_pages,
                                    int keep) {
    std::vector<int> all(n_pages);
    std::iota(all.begin(), all.end(), 0);
    if (n_pages <= keep || n_pages == 0) return all;
    std::vector<double> u(n_pages, 0.0);
    for (int i = 0; i < n_pages; ++i)
        for (int g = 0; g < G; ++g)
            for (int c = 0; c < d; ++c) {
                const double a = double(q[g * d + c]) * kmin[static_cast<size_t>(i) * d + c];
                const double b = double(q[g * d + c]) * kmax[static_cast<size_t>(i) * d + c];
                u[i] += std::max(a, b);
            }
    std::stable_sort(all.begin(), all.end(), [&](int a, int b) { return u[a] > u[b]; });
    all.resize(std::max(0, keep));
    std::sort(all.begin(), all.end());
    return all;
}

void register_quest() {
    register_selection({"quest", "read-time page selection by key bounds (Quest)", [](PolicyParams& p) {
                            Selection s;
                            s.kind = "quest";
                            s.budget = p.get_int("budget", 0);
                            require(s.budget > 0, "selection quest: budget=<entries read per KV head> is required and must be > 0");
                            const int64_t page = p.get_int("page", 16), skip = p.get_int("skip_layers", 2);
                            require(page > 0, "selection quest: page must be > 0");
                            require(skip >= 0, "selection quest: skip_layers must be ≥ 0");
                            s.page = static_cast<int>(page);
                            s.skip_layers = static_cast<int>(skip);
                            return s;
                        }});
}

}  // namespace kvsieve
