#pragma once
// Which pages of each KV head a decode step reads (Quest's read-time selection among them), and how they are cut
// into the flash-decoding spans that are attended in parallel and merged.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cache/head_cache.h"
#include "cache/kv_pool.h"
#include "policy/selection.h"

namespace kvsieve {

/// One page of a KV head as a decode step reads it.
struct PageRef {
    int32_t page = 0;              ///< the page's index in its pool
    const KVPool* pool = nullptr;  ///< the layout of its region (element types, row bytes)
    int cnt = 0;                   ///< entries it holds (≤ the pool's page size)
    int64_t off = 0;               ///< index of its first entry in the head's attention order
    bool always = false;  ///< read whatever a read-time selection chooses (sinks, window, the current token's page)
    const PageStore* store = nullptr;  ///< the region holding it, and its page index there (for the key bounds)
    size_t index = 0;
};

/// Pages per span of the flash-decoding split of a decode step: each KV head's pages are cut into spans of this
/// many consecutive pages (the last one shorter), attended independently (in parallel) and merged in span order.
/// The split is fixed by the number of pages alone, never by the thread count, so a decode step's output, and the
/// logits after it, are bit-identical whatever the number of threads. 16 pages (256 entries at the default page
/// size) keep the merge (G·d floats per span) negligible beside the span's reads and still give a 4k-token head 16
/// spans to spread over the threads.
constexpr size_t kDecodeSpanPages = 16;

/// Spans of a head holding `pages` pages in a decode step: ⌈pages / kDecodeSpanPages⌉, at least 1.
int decode_span_count(size_t pages);

/// Every page of one KV head in attention order (sinks, global, window), each with the index of its first entry in
/// that order; all but the global region's pages are marked `always`, and so is the global region's last page when
/// the policy has no window (`window` = 0: the newest entry is the last of the global region). `pages` becomes the
/// pages (its capacity is kept: a decode step reuses it) and `entries` the number of entries they hold.
void head_pages(const HeadCache& hc, int page_tokens, int window, std::vector<PageRef>& pages, int64_t& entries);

/// The working space of select_quest_pages for one KV head, kept from step to step (nothing allocated once warm).
struct QuestSelectScratch {
    std::vector<int> candidates;              ///< indices into pl of the pages not marked `always`
    std::vector<const uint16_t*> kmin, kmax;  ///< their bounds, [candidates]
    std::vector<char> keep;                   ///< [pages]: 1 for a page kept
    QuestRanking ranking;                     ///< quest_rank_pages' result and working space
};

/// Quest's read-time selection over one KV head's pages (Tang et al. 2024, Quest, §3: each page's upper bound of
/// q·k over its keys' per-channel minimum and maximum, policy/selection.h): the pages not marked `always` are ranked
/// by that bound for the group's queries q [G][d] and the best ⌈sel.budget / page_tokens⌉ kept, in their order; the
/// bounds are the ones each page store keeps beside its pages (PageStore::key_bounds). Adds the entries of every
/// page before the selection to `total` and of the pages kept to `read`. `scratch`: this head's QuestSelectScratch.
void select_quest_pages(std::vector<PageRef>& pl, int page_tokens, const Selection& sel, const float* q, int G, int d,
                        QuestSelectScratch& scratch, int64_t& read, int64_t& total);

}  // namespace kvsieve
