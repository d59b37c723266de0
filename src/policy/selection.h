#pragma once
// Selection: the read-time primitive (docs/design.md §1). At a decode step each KV head's attention reads only a subset
// of its cached entries, chosen for the step's queries; the cache itself is unchanged, so a selection composes with any
// admission or eviction policy ("wgkv:…+quest:read_budget=512").
#include <cstdint>
#include <string>
#include <vector>

namespace kvsieve {

/// Which selection, and its parameters. kind "" means none: every kept entry is read.
struct Selection {
    std::string kind;        ///< "" or "quest"
    int64_t budget = 0;      ///< global-region entries read per KV head and decode step (whole pages, rounded up);
                             ///< sinks, the local window and the current token's page are read besides
    int page = 16;           ///< tokens per page (must be the KV pool's page size)
    int skip_layers = 2;     ///< the first layers read everything (Quest §4: its first two layers)
    bool group_max = false;  ///< GQA: rank a page by the largest of its G query heads' bounds (group=max) instead
                             ///< of their sum (group=sum, the default)
    bool active() const { return !kind.empty(); }
    /// "quest(read_budget=512,page=16,skip_layers=2)" (",group=max" when set), or "" for none.
    std::string describe() const;
};

/// Quest's page choice (Tang et al. 2024, "Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference", §3):
/// page i with per-channel key bounds kmin_i, kmax_i [d] gets the upper bound of any of its attention logits,
/// U_i = Σ_c max(q_c · kmin_i,c, q_c · kmax_i,c). Under GQA the G query heads q [G][d] of the KV head share one
/// choice, ranked by Σ_g U_i(q_g) (the bound of the group's summed logits; Quest is defined for one query head).
/// Returns the indices of the `keep` pages of highest bound (ties to the lower index; all when n_pages ≤ keep) in
/// increasing order. kmin, kmax: [n_pages][d] IEEE binary16 (the bounds as PageStore::key_bounds keeps them).
/// Computed as Σ_c P_c·kmax_i,c + N_c·kmin_i,c with P_c = Σ_g max(q_gc, 0) and N_c = Σ_g min(q_gc, 0) (the same sum
/// regrouped: two binary16 × float32 dot products per page), so pages whose bounds differ in the last bits may rank
/// in another order than the sum written out in double. group_max: rank by max_g U_i(q_g) instead (2·G dot products
/// per page): a page that one query head of the group needs, such as an attention sink, is not outvoted by the others.
std::vector<int> quest_choose_pages(const float* q, int G, int d, const uint16_t* kmin, const uint16_t* kmax,
                                    int n_pages, int keep, bool group_max = false);

/// The result and working space of quest_rank_pages, kept by the caller from step to step: each vector is sized on
/// first use and keeps its capacity, so a decode step's ranking allocates nothing once the page count stops growing.
struct QuestRanking {
    std::vector<int> chosen;         ///< the kept pages' indices, increasing
    std::vector<float> pos, neg, u;  ///< P and N [R][d] (R = G with group_max, else 1), the pages' bounds [n_pages]
};

/// quest_choose_pages with each page's bounds where they lie: kmin[i], kmax[i] point at page i's d binary16 values
/// (the rows PageStore::key_bounds keeps), so the decode step ranks pages without gathering them. The chosen pages
/// go to r.chosen.
void quest_rank_pages(const float* q, int G, int d, const uint16_t* const* kmin, const uint16_t* const* kmax,
                      int n_pages, int keep, bool group_max, QuestRanking& r);

}  // namespace kvsieve
