#pragma once
// Names that clients and operators choose (predictors, conversations, saved sequences) and that may become one
// component of a file name.
#include <string>

namespace kvsieve {

/// True for 1 to 64 characters of [A-Za-z0-9_.-] not starting with '.': no path separator, no "." or "..", no
/// hidden file, nothing a shell or a URL must escape.
bool is_safe_name(const std::string& s);

}  // namespace kvsieve
