#pragma once
// Sequences the server keeps between requests under a client-chosen conversation id, so that the next turn of a
// conversation feeds only its new tokens.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "session/cache_file.h"
#include "session/session.h"

namespace kvsieve {

/// The kept sequences: after a request that names a conversation id ends, its KV cache (with the policy's
/// compression as it stands: only the kept entries) and token history stay in the KV pool under that id; a later
/// request with the id whose prompt starts with those tokens feeds only the rest (prefix reuse, as a multi-turn
/// chat carries its cache from turn to turn). At most `capacity` are kept. Each entry belongs to an owner (the API
/// key's owner tag, serve/auth.h; "" on a server without keys), and room is made fairly between owners: the owner
/// that keeps the most (entries when the capacity is reached, pool bytes when a running request needs pages) loses
/// its least recently used entry first. So one key's new conversations evict its own before anyone else's, a key
/// keeping fewer than its share is never crowded out, and with a single owner the rule is plain least recently
/// used. Only the scheduler's thread uses it (not thread-safe).
class ConversationStore {
public:
    struct Entry {
        std::unique_ptr<KVCache> cache;
        std::unique_ptr<Session> session;  ///< over *cache
        std::string policy_spec;           ///< the spec the cache's policy was parsed from
        std::string owner;                 ///< the owner tag of the key that keeps it ("" without keys)
        GenerationState pending;  ///< next-token logits and sampler state when restored from a file that had them
        uint64_t last_used = 0;   ///< a counter: larger is more recent
    };
    struct Info {
        std::string id;
        int64_t tokens = 0;
        uint64_t kv_bytes = 0;  ///< bytes of the pool pages it holds
        std::string policy;
    };

    /// capacity ≥ 0 (0: nothing is kept).
    explicit ConversationStore(int capacity) : capacity_(capacity) {}

    /// Keeps `e` under `id` (replacing what was kept under it), then, while more than the capacity are kept, drops
    /// the least recently used entry of the owner keeping the most entries (e.owner's own when it keeps the most),
    /// freeing its pages.
    void put(const std::string& id, Entry e);
    /// Removes the entry kept under `id` and hands it over (its cache.empty when none is kept).
    Entry take(const std::string& id);
    /// The entry kept under `id`, or null.
    Entry* find(const std::string& id);
    /// Drops the entry under `id` (its pages return to the pool); false when none is kept.
    bool drop(const std::string& id);
    /// Frees pages for a running request: drops the least recently used entry of the owner whose entries hold the
    /// most pool bytes (ties: the owner whose entry is older); false when none is kept.
    bool drop_for_pages();
    std::vector<Info> list() const;
    size_t size() const { return entries_.size(); }
    int capacity() const { return capacity_; }

private:
    int capacity_;
    uint64_t clock_ = 0;
    std::map<std::string, Entry> entries_;

    /// The least recently used entry among those of the owner ranking highest by `weight` (summed over an owner's
    /// entries; ties: the owner with the older entry), or end() when none is kept.
    template <class Weight>
    std::map<std::string, Entry>::iterator victim(Weight weight);
};

}  // namespace kvsieve
