#include "serve/cache_quota.h"

#include <filesystem>
#include <system_error>

#include "serve/scheduler.h"

namespace kvsieve {

namespace fs = std::filesystem;

uint64_t saved_sequence_bytes(const std::string& folder, const std::string& except) {
    uint64_t total = 0;
    std::error_code ec;
    fs::directory_iterator it(folder, ec);
    if (ec) return 0;
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        if (ec) break;
        const fs::path& p = it->path();
        const std::string name = p.filename().string();
        if (name == except || name.size() <= 6 || name.compare(name.size() - 6, 6, ".kvseq") != 0) continue;
        std::error_code e2;
        const fs::file_status st = fs::symlink_status(p, e2);  // a link is not followed
        if (e2 || !fs::is_regular_file(st)) continue;
        const auto n = fs::file_size(p, e2);
        if (!e2) total += static_cast<uint64_t>(n);
    }
    return total;
}

void check_cache_quota(const std::string& path, uint64_t bytes, uint64_t quota_bytes) {
    if (quota_bytes == 0) return;
    const fs::path p(path);
    const uint64_t saved = saved_sequence_bytes(p.parent_path().string(), p.filename().string());
    if (saved + bytes <= quota_bytes) return;
    throw StatusError(
        403,
        "the sequence needs " + std::to_string(bytes) + " bytes and this key's saved sequences already take " +
            std::to_string(saved) + " bytes of its " + std::to_string(quota_bytes) +
            " (the server's --cache-dir-quota-mb); delete saved sequences (DELETE /v1/cache/saved/NAME) to free space");
}

}  // namespace kvsieve
