#include "serve/conversations.h"

#include <algorithm>

namespace kvsieve {

void ConversationStore::put(const std::string& id, Entry e) {
    if (capacity_ == 0) return;  // e's pages go back to the pool here
    e.last_used = ++clock_;
    entries_.erase(id);  // the old entry's session goes before its cache (member order), not by assignment
    entries_.emplace(id, std::move(e));
    while (static_cast<int>(entries_.size()) > capacity_) drop_oldest();
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

bool ConversationStore::drop_oldest() {
    if (entries_.empty()) return false;
    auto oldest = std::min_element(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
        return a.second.last_used < b.second.last_used;
    });
    entries_.erase(oldest);
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
