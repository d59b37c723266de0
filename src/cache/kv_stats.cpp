#include "cache/kv_stats.h"

#include <algorithm>
#include <cstdio>

namespace kvsieve {

namespace {
std::string mib(uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / 1048576.0);
    return buf;
}
}  // namespace

std::vector<std::vector<double>> KVStats::head_density() const {
    const int64_t full_beyond = tokens - window;  // entries a full cache holds beyond the window, per head
    std::vector<std::vector<double>> d(beyond.size());
    for (size_t l = 0; l < beyond.size(); ++l)
        for (int64_t b : beyond[l]) d[l].push_back(full_beyond > 0 ? static_cast<double>(b) / full_beyond : 1.0);
    return d;
}

std::string KVStats::table() const {
    char buf[256];
    std::string s;
    std::snprintf(buf, sizeof buf, "KV cache — policy %s, %ld tokens, s=%d w=%d, %s keys/values\n", policy.c_str(),
                  static_cast<long>(tokens), sinks, window, kv_type.c_str());
    s += buf;
    if (kv_quant_at == "admission" && kv_type_local != kv_type) {
        std::snprintf(buf, sizeof buf, "  quantized at admission: sinks and window %s (%s), global region %s (%s)\n",
                      kv_type_local.c_str(), mib(kv_bytes_local).c_str(), kv_type.c_str(),
                      mib(kv_bytes_global).c_str());
        s += buf;
    }
    std::snprintf(
        buf, sizeof buf, "  density %.3f | compression ratio %.3f | KV bytes peak %s, final %s, full F16 %s\n", density,
        compression_ratio, mib(kv_bytes_peak).c_str(), mib(kv_bytes_final).c_str(), mib(kv_bytes_full).c_str());
    s += buf;
    if (scorer_state_bytes > 0) {
        std::snprintf(buf, sizeof buf, "  scorer state %s beside the pages (per sequence)\n",
                      mib(scorer_state_bytes).c_str());
        s += buf;
    }
    if (kv_bytes_full > 0) {
        const double saved = static_cast<double>(kv_bytes_full) - static_cast<double>(kv_bytes_final);
        std::snprintf(buf, sizeof buf, "  memory saved against the full F16 cache: %.2f MiB (%.1f%%)",
                      saved / 1048576.0, 100.0 * saved / static_cast<double>(kv_bytes_full));
        s += buf;
        if (kv_bytes_final > 0) {
            std::snprintf(buf, sizeof buf, ", %.1f× smaller",
                          static_cast<double>(kv_bytes_full) / static_cast<double>(kv_bytes_final));
            s += buf;
        }
        s += "\n";
    }
    if (read_fraction < 1) {
        std::snprintf(
            buf, sizeof buf,
            "  read-time selection: %.1f%% of the kept entries read per decode step; key bounds %s beside the pages\n",
            100.0 * read_fraction, mib(selection_bytes).c_str());
        s += buf;
    }
    s += "  layer | head entries min / median / max\n";
    for (size_t l = 0; l < entries.size(); ++l) {
        std::vector<int64_t> e = entries[l];
        std::sort(e.begin(), e.end());
        if (e.empty()) continue;
        std::snprintf(buf, sizeof buf, "  %5zu | %ld / %ld / %ld\n", l, static_cast<long>(e.front()),
                      static_cast<long>(e[e.size() / 2]), static_cast<long>(e.back()));
        s += buf;
    }
    return s;
}

nlohmann::json KVStats::to_json() const {
    nlohmann::json j;
    j["policy"] = policy;
    j["kv_type"] = kv_type;
    j["kv_quant_at"] = kv_quant_at;
    j["kv_type_local"] = kv_type_local;
    j["kv_bytes_local"] = kv_bytes_local;
    j["kv_bytes_global"] = kv_bytes_global;
    j["tokens"] = tokens;
    j["sinks"] = sinks;
    j["window"] = window;
    j["compression_ratio"] = compression_ratio;
    j["density"] = density;
    j["kv_bytes_peak"] = kv_bytes_peak;
    j["kv_bytes_final"] = kv_bytes_final;
    j["kv_bytes_full"] = kv_bytes_full;
    j["scorer_state_bytes"] = scorer_state_bytes;
    j["read_fraction"] = read_fraction;
    j["selection_bytes"] = selection_bytes;
    j["layers"] = nlohmann::json::array();
    for (size_t l = 0; l < entries.size(); ++l) j["layers"].push_back({{"layer", l}, {"entries", entries[l]}});
    return j;
}

}  // namespace kvsieve
