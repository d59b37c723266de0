#include "util/names.h"

#include <algorithm>
#include <cctype>

namespace kvsieve {

bool is_safe_name(const std::string& s) {
    return !s.empty() && s.size() <= 64 && s[0] != '.' && std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
    });
}

}  // namespace kvsieve
