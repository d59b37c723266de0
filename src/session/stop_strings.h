#pragma once
// Stop strings over streamed text: what may be sent now, and where generation must stop.
#include <string>
#include <vector>

namespace kvsieve {

/// Watches generated text for the first occurrence of any stop string (OpenAI `stop`). Text that could still
/// become the start of a stop string is held back until it cannot, so no part of a stop string is ever sent.
/// Text is pushed in whole UTF-8 characters (Utf8Stream output), so what is returned is whole characters too.
class StopMatcher {
public:
    /// Empty strings in `stops` are ignored.
    explicit StopMatcher(std::vector<std::string> stops = {});
    /// Appends text; returns what may be sent now. Once a stop string has appeared, stopped() is true, the
    /// returned text ends just before it and later pushes return nothing.
    std::string push(const std::string& text);
    /// The text held back (when no stop string came); empties the buffer.
    std::string finish();
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
};

}  // namespace kvsieve
