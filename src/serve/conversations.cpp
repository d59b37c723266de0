#include "serve/conversations.h"

#include <algorithm>

namespace kvsieve {

void ConversationStore::put(const std::string& id, Entry e) {
    if (capacity_ == 0) return;  // e's pages go back to the pool here
    e.last_used = ++clock_;
    entries_.erase(id);  // the old entry's session goes before its cache (member order), not by assignment
    entries_.emplace(id, std::move(e));
    while (static_cast<int>(entries_.size()) > capacity_) entries_.erase(victim([](const Entry&) { return 1.0; }));
}

template <class Weight>
std::map<std::string, ConversationStore::Entry>::iterator ConversationStore::victim(Weight weight) {
    struct Holder {
        double weight = 0;
        std::map<std::string, Entry>::iterator oldest;
    };
    std::map<std::string, Holder> holders;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        auto [h, fresh] = holders.try_emplace(it->second.owner);
        h->second.weight += weight(it->second);
        if (fresh || it->second.last_used < h->second.oldest->second.last_used) h->second.oldest = it;
    }
    auto out = entries_.end();
    double most = -1;
    for (const auto& [owner, h] : holders)
        if (h.weight > most || (h.weight == most && h.oldest->second.last_used < out->second.last_used)) {
            most = h.weight;
            out = h.oldest;
        }
    return out;
}

ConversationStore::Entry ConversationStore::take(const std::string& id) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return {};
    Entry e = std::move(it->second);
    entries_.erase(it);
    return e;
}

ConversationStore::Entry* ConversationStore::find(const std::string& id) {
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : &it->second;
}

bool ConversationStore::drop(const std::string& id) { return entries_.erase(id) > 0; }

bool ConversationStore::drop_for_pages() {
    if (entries_.empty()) return false;
    entries_.erase(victim([](const Entry& e) { return static_cast<double>(e.cache->stats().kv_bytes_final); }));
    return true;
}

std::vector<ConversationStore::Info> ConversationStore::list() const {
    std::vector<Info> out;
    for (const auto& [id, e] : entries_) {
        const KVStats st = e.cache->stats();
        out.push_back({id, e.session->n_tokens(), st.kv_bytes_final, e.policy_spec});
    }
    return out;
}

}  // namespace kvsieve
