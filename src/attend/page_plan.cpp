#include "attend/page_plan.h"

#include <algorithm>

namespace kvsieve {

int decode_span_count(size_t pages) {
    return static_cast<int>(std::max<size_t>(1, (pages + kDecodeSpanPages - 1) / kDecodeSpanPages));
}

void head_pages(const HeadCache& hc, int page_tokens, int window, std::vector<PageRef>& pages, int64_t& entries) {
    pages.clear();
    int64_t off = 0;
    for (Region r : kRegionsInOrder) {
        const PageStore* ps = hc.region(r);
        const int P = page_tokens;
        for (size_t pi = 0; pi < ps->pages().size(); ++pi) {
            const int cnt = static_cast<int>(std::min<int64_t>(P, ps->size() - static_cast<int64_t>(pi) * P));
            pages.push_back({ps->pages()[pi], &ps->pool(), cnt, off, r != Region::kGlobal, ps, pi});
            off += cnt;
        }
        // Without a window the newest entry is the last of the global region.
        if (r == Region::kGlobal && window == 0 && !ps->pages().empty()) pages.back().always = true;
    }
    entries = off;
}

void select_quest_pages(std::vector<PageRef>& pl, int page_tokens, const Selection& sel, const float* q, int G, int d,
                        QuestSelectScratch& s, int64_t& read, int64_t& total) {
    std::vector<int>& cand = s.candidates;
    cand.clear();
    for (size_t i = 0; i < pl.size(); ++i) {
        total += pl[i].cnt;
        if (!pl[i].always) cand.push_back(static_cast<int>(i));
    }
    const int keep = static_cast<int>((sel.budget + page_tokens - 1) / page_tokens);
    if (static_cast<int>(cand.size()) > keep) {
        s.kmin.resize(cand.size());
        s.kmax.resize(cand.size());
        for (size_t c = 0; c < cand.size(); ++c)
            pl[cand[c]].store->key_bounds(pl[cand[c]].index, &s.kmin[c], &s.kmax[c]);
        quest_rank_pages(q, G, d, s.kmin.data(), s.kmax.data(), static_cast<int>(cand.size()), keep, sel.group_max,
                         s.ranking);
        s.keep.resize(pl.size());
        for (size_t i = 0; i < pl.size(); ++i) s.keep[i] = pl[i].always;
        for (int c : s.ranking.chosen) s.keep[cand[c]] = 1;
        size_t n = 0;  // the kept pages, in their order, compacted in place
        for (size_t i = 0; i < pl.size(); ++i)
            if (s.keep[i]) pl[n++] = pl[i];
        pl.resize(n);
    }
    for (const auto& p : pl) read += p.cnt;
}

}  // namespace kvsieve
