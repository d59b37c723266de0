#include "cache/head_cache.h"

#include <algorithm>
#include <vector>

namespace kvsieve {

HeadCache::HeadCache(KVPool* pool, int sinks, int window)
    : s_(sinks), w_(window), sinks_(&pool->local()), window_(&pool->local()), global_(pool) {}

HeadCache::Slot HeadCache::append(const float* k, const float* v, int32_t pos, float score, const Admit& admit) {
    if (sinks_.size() < s_) {
        sinks_.push(k, v, pos, score);
        return {Region::kSinks, sinks_.size() - 1};
    }
    if (w_ == 0) {  // admission at write
        if (!admit(pos, score, nullptr, -1)) return {};
        global_.push(k, v, pos, score);
        return {Region::kGlobal, global_.size() - 1};
    }
    if (window_.size() < w_) {
        window_.push(k, v, pos, score);
        return {Region::kWindow, window_.size() - 1};
    }
    // The ring is full: the oldest entry leaves the window.
    const int64_t slot = ring_head_;
    if (admit(window_.positions()[slot], window_.scores()[slot], &window_, slot)) global_.push_copy(window_, slot);
    window_.set(slot, k, v, pos, score);
    ring_head_ = (ring_head_ + 1) % w_;
    return {Region::kWindow, slot};
}

void HeadCache::truncate(int32_t n) {
    for (PageStore* ps : {&sinks_, &global_}) {
        std::vector<char> keep(ps->size());
        for (int64_t i = 0; i < ps->size(); ++i) keep[i] = ps->positions()[i] < n;
        ps->retain(keep);
    }
    struct Row {
        int32_t pos;
        float score;
        std::vector<float> k, v;
    };
    std::vector<Row> rows;
    const int d = window_.pool().head_dim();
    for (int64_t i = 0; i < window_.size(); ++i)
        if (window_.positions()[i] < n) {
            Row r{window_.positions()[i], window_.scores()[i], std::vector<float>(d), std::vector<float>(d)};
            window_.read(i, r.k.data(), r.v.data());
            rows.push_back(std::move(r));
        }
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.pos < b.pos; });
    window_.clear();
    ring_head_ = 0;
    for (const Row& r : rows) window_.push(r.k.data(), r.v.data(), r.pos, r.score);
}

void HeadCache::clear() {
    sinks_.clear();
    window_.clear();
    global_.clear();
    ring_head_ = 0;
}

void HeadCache::save(BinaryWriter& w) const {
    w.pod<int64_t>(ring_head_);
    sinks_.save(w);
    window_.save(w);
    global_.save(w);
}

void HeadCache::load(BinaryReader& r, int64_t max_entries) {
    ring_head_ = r.pod<int64_t>();
    sinks_.load(r, s_);
    window_.load(r, w_);
    global_.load(r, max_entries);
    if (ring_head_ < 0 || (ring_head_ > 0 && ring_head_ >= window_.size()) || sinks_.size() > s_ || window_.size() > w_)
        fail(r.what(), " is corrupted (a head's regions do not fit its sinks and window)");
}

}  // namespace kvsieve
