#include "attend/prefill_stat_share.h"

namespace kvsieve {

const std::vector<float>* PrefillStatShare::find(int layer, int head, KeyStat stat, KVType type, KVType local_type,
                                                 const std::vector<int32_t>& pos) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it =
        entries_.find({layer, head, static_cast<int>(stat), static_cast<int>(type), static_cast<int>(local_type)});
    if (it == entries_.end() || it->second.pos != pos) return nullptr;
    ++hits_;
    return &it->second.a;  // entries are not moved by later insertions (std::map), only by put/clear of this key
}

void PrefillStatShare::put(int layer, int head, KeyStat stat, KVType type, KVType local_type,
                           const std::vector<int32_t>& pos, const std::vector<float>& a) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_[{layer, head, static_cast<int>(stat), static_cast<int>(type), static_cast<int>(local_type)}] =
        Entry{pos, a};
}

void PrefillStatShare::clear() {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.clear();
}

int64_t PrefillStatShare::hits() const {
    std::lock_guard<std::mutex> lock(mu_);
    return hits_;
}

}  // namespace kvsieve
