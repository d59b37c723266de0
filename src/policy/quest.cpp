// quest: read-time page selection by an upper bound on the attention logits (Tang et al. 2024, "Quest:
// Query-Aware Sparsity for Efficient Long-Context LLM Inference"). Per KV head, the cache's 16-token pages carry
// per-channel minimum and maximum keys; at each decode step the global-region pages with the highest bound
// Σ_c max(q_c·min_c, q_c·max_c) are read, `read_budget` tokens of them, besides the sinks, the local window and the page of
// the current token; the first two layers read everything (the paper's choice). Prefill is as the policy's. The bounds
// are kept beside the pages (PageStore::key_bounds: binary16 rounded outwards, extended on appends, recomputed for a
// page an eviction changed), so a page left out has neither its keys nor its values read, and ranked where they lie
// (two SIMD dot products per page: selection.h). Composes with any cache policy:
//   quest:read_budget=512[,page=16][,skip_layers=2][,group=sum|max]   (the full cache, read sparsely)
//   wgkv:model=DIR+quest:read_budget=512                   (WG-KV's cache, read sparsely: the paper's Fig. 9)
// (read_budget was `budget`, still accepted as a deprecated alias; docs/glossary.md)
#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "kernels/dot.h"
#include "policy/policy.h"
#include "policy/selection.h"
#include "util/error.h"

namespace kvsieve {

std::string Selection::describe() const {
    if (!active()) return "";
    return kind + "(read_budget=" + std::to_string(budget) + ",page=" + std::to_string(page) +
           ",skip_layers=" + std::to_string(skip_layers) + (group_max ? ",group=max" : "") + ")";
}

void quest_rank_pages(const float* q, int G, int d, const uint16_t* const* kmin, const uint16_t* const* kmax,
                      int n_pages, int keep, bool group_max, QuestRanking& rk) {
    std::vector<int>& all = rk.chosen;
    all.resize(n_pages);
    std::iota(all.begin(), all.end(), 0);
    if (n_pages <= keep || n_pages == 0) return;
    // max(q_c·lo_c, q_c·hi_c) = max(q_c, 0)·hi_c + min(q_c, 0)·lo_c (hi_c ≥ lo_c), so a query head's bound is two dot
    // products of length d; summed over the group, pos_c = Σ_g max(q_gc, 0) and neg_c = Σ_g min(q_gc, 0) make the
    // group's sum two dot products whatever G. group_max keeps one (pos, neg) pair per query head.
    const int R = group_max ? G : 1;
    std::vector<float>&pos = rk.pos, &neg = rk.neg;
    pos.assign(static_cast<size_t>(R) * d, 0.0f);
    neg.assign(static_cast<size_t>(R) * d, 0.0f);
    for (int g = 0; g < G; ++g)
        for (int c = 0; c < d; ++c) {
            const float x = q[static_cast<size_t>(g) * d + c];
            const size_t r = static_cast<size_t>(group_max ? g : 0) * d + c;
            (x > 0 ? pos[r] : neg[r]) += x;
        }
    const auto dot = dot_kernels().f16;
    std::vector<float>& u = rk.u;
    u.resize(n_pages);
    for (int i = 0; i < n_pages; ++i) {
        float best = -std::numeric_limits<float>::infinity();
        for (int r = 0; r < R; ++r)
            best = std::max(best, dot(kmax[i], pos.data() + static_cast<size_t>(r) * d, d) +
                                      dot(kmin[i], neg.data() + static_cast<size_t>(r) * d, d));
        u[i] = best;
    }
    const auto better = [&](int a, int b) { return u[a] > u[b] || (u[a] == u[b] && a < b); };
    const int k = std::max(0, keep);
    std::nth_element(all.begin(), all.begin() + k, all.end(), better);
    all.resize(k);
    std::sort(all.begin(), all.end());
}

std::vector<int> quest_choose_pages(const float* q, int G, int d, const uint16_t* kmin, const uint16_t* kmax,
                                    int n_pages, int keep, bool group_max) {
    std::vector<const uint16_t*> lo(n_pages), hi(n_pages);
    for (int i = 0; i < n_pages; ++i) {
        lo[i] = kmin + static_cast<size_t>(i) * d;
        hi[i] = kmax + static_cast<size_t>(i) * d;
    }
    QuestRanking r;
    quest_rank_pages(q, G, d, lo.data(), hi.data(), n_pages, keep, group_max, r);
    return std::move(r.chosen);
}

void register_quest() {
    // page: the KV pool's page size, which the bounds are kept for; accepted only at that value (16).
    register_selection(
        {"quest",
         "read-time page selection by key bounds (Quest)",
         {with_alias(with_note(int_param("read_budget", 1, kMaxTokens, "",
                                         "global-region entries read per KV head and decode step "
                                         "(whole pages)",
                                         "Quest §3 (token budget)"),
                               "required"),
                     "budget"),
          int_param("page", 16, 16, "16", "tokens per page: fixed, the KV pool's page size", "Quest §3 (page size 16)"),
          int_param("skip_layers", 0, 65536, "2", "first layers that read every entry", "Quest §4 (first two layers)"),
          enum_param("group", {"sum", "max"}, "sum",
                     "GQA: rank a page by the sum of its query heads' bounds, or by the largest",
                     "Quest §3 (defined for one query head)")},
         [](PolicyParams& p) {
             Selection s;
             s.kind = "quest";
             require(p.has("read_budget"), "selection quest: read_budget=<entries read per KV head> is required");
             s.budget = p.get_int("read_budget", 0);
             s.page = static_cast<int>(p.get_int("page"));
             s.skip_layers = static_cast<int>(p.get_int("skip_layers"));
             s.group_max = p.get_string("group") == "max";
             return s;
         }});
}

}  // namespace kvsieve
