#pragma once
// Errors of kvsieve: one exception type whose message is a single line naming the problem.
#include <sstream>
#include <stdexcept>
#include <string>

namespace kvsieve {

/// The error every layer throws for bad input or an impossible request. what() is one line, meant to be
/// printed as it is by the command-line tool ("error: <what>").
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

/// Concatenates its arguments with operator<< into one string.
template <class... Args>
std::string cat(Args&&... args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

/// Throws Error whose message is the concatenation of args.
template <class... Args>
[[noreturn]] void fail(Args&&... args) {
    throw Error(cat(std::forward<Args>(args)...));
}

/// Throws Error(concatenated args) unless cond holds.
template <class... Args>
void require(bool cond, Args&&... args) {
    if (!cond) fail(std::forward<Args>(args)...);
}

}  // namespace kvsieve
