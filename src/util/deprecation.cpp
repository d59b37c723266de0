#include "util/deprecation.h"

#include <cstdio>
#include <map>
#include <mutex>

namespace kvsieve {

namespace {
std::mutex& mu() {
    static std::mutex m;
    return m;
}
std::map<std::string, int>& printed() {
    static std::map<std::string, int> p;
    return p;
}
}  // namespace

bool warn_deprecated(const std::string& old_spelling, const std::string& new_spelling, const std::string& note) {
    std::lock_guard<std::mutex> lock(mu());
    int& n = printed()[old_spelling];
    if (n > 0) return false;
    n = 1;
    std::fprintf(stderr, "warning: %s is deprecated, use %s%s%s\n", old_spelling.c_str(), new_spelling.c_str(),
                 note.empty() ? "" : ": ", note.c_str());
    std::fflush(stderr);
    return true;
}

int deprecation_warnings_printed(const std::string& old_spelling) {
    std::lock_guard<std::mutex> lock(mu());
    auto it = printed().find(old_spelling);
    return it == printed().end() ? 0 : it->second;
}

void reset_deprecation_warnings() {
    std::lock_guard<std::mutex> lock(mu());
    printed().clear();
}

}  // namespace kvsieve
