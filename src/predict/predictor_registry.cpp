#include "predict/predictor_registry.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

#include "util/error.h"

namespace kvsieve {

namespace fs = std::filesystem;

namespace {
std::string file_stamp(const fs::path& p) {
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    const auto t = fs::last_write_time(p, ec);
    return cat(ec ? 0 : size, "@", ec ? 0 : static_cast<long long>(t.time_since_epoch().count()));
}
}  // namespace

ArtifactStamp artifact_stamp(const std::string& path) {
    std::error_code ec;
    const fs::path canon = fs::canonical(path, ec);
    require(!ec, "'", path, "' does not exist");
    ArtifactStamp s;
    s.path = canon.string();
    if (!fs::is_directory(canon)) {
        s.stamp = file_stamp(canon);
        return s;
    }
    std::vector<std::string> parts;
    for (const auto& e : fs::directory_iterator(canon, ec))
        if (e.is_regular_file()) parts.push_back(e.path().filename().string() + "=" + file_stamp(e.path()));
    std::sort(parts.begin(), parts.end());
    for (const auto& p : parts) s.stamp += p + ";";
    return s;
}

PredictorRegistry& PredictorRegistry::instance() {
    static PredictorRegistry r;
    return r;
}

std::shared_ptr<const void> PredictorRegistry::get_erased(
    const std::string& kind, const std::string& path, const std::string& variant,
    const std::function<std::shared_ptr<const void>(const std::string&)>& load) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return load(path);  // the loader's own error names the missing file
    const ArtifactStamp st = artifact_stamp(path);
    const std::string key = kind + '\n' + st.path + '\n' + variant;
    std::lock_guard<std::mutex> lk(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.stamp == st) return it->second.value;
    auto value = load(path);
    ++loads_;
    entries_[key] = Entry{st, value};
    return value;
}

uint64_t PredictorRegistry::loads() const {
    std::lock_guard<std::mutex> lk(mu_);
    return loads_;
}

size_t PredictorRegistry::size() const {
    std::lock_guard<std::mutex> lk(mu_);
    return entries_.size();
}

void PredictorRegistry::clear() {
    std::lock_guard<std::mutex> lk(mu_);
    entries_.clear();
}

}  // namespace kvsieve
