#include "predict/data_dirs.h"

#include <cstdlib>
#include <filesystem>

#ifndef KVSIEVE_SOURCE_DIR
#define KVSIEVE_SOURCE_DIR ""
#endif
#ifndef KVSIEVE_BUILD_DIR
#define KVSIEVE_BUILD_DIR ""
#endif

namespace kvsieve {

namespace fs = std::filesystem;

namespace {
/// The running binary's path ("" when /proc/self/exe cannot be read).
fs::path exe_path() {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path() : exe;
}

/// $<xdg>/kvsieve/<leaf>, else $HOME/<fallback>/kvsieve/<leaf>; "" when neither is set (or set empty).
std::string xdg_dir(const char* xdg, const char* fallback, const char* leaf) {
    const char* x = std::getenv(xdg);
    if (x && *x) return (fs::path(x) / "kvsieve" / leaf).string();
    const char* home = std::getenv("HOME");
    if (home && *home) return (fs::path(home) / fallback / "kvsieve" / leaf).string();
    return {};
}
}  // namespace

std::vector<std::string> shipped_dirs() {
    std::vector<std::string> dirs;
    const fs::path exe = exe_path();
    std::error_code ec;
    if (!exe.empty()) {
        const fs::path share = exe.parent_path().parent_path() / "share" / "kvsieve";
        if (fs::is_directory(share, ec)) dirs.push_back(share.string());
    }
    const std::string build = KVSIEVE_BUILD_DIR;
    if (*KVSIEVE_SOURCE_DIR && !build.empty() && exe.string().starts_with(build + "/") &&
        fs::is_directory(KVSIEVE_SOURCE_DIR, ec))
        dirs.push_back(KVSIEVE_SOURCE_DIR);
    return dirs;
}

std::string find_shipped(const std::string& relative) {
    for (const std::string& d : shipped_dirs()) {
        std::error_code ec;
        const fs::path p = fs::path(d) / relative;
        if (fs::exists(p, ec)) return p.string();
    }
    return {};
}

std::string user_predictor_dir() { return xdg_dir("XDG_DATA_HOME", ".local/share", "models"); }

std::string user_train_dir() { return xdg_dir("XDG_CACHE_HOME", ".cache", "train"); }

}  // namespace kvsieve
