#pragma once
// Turning a stream of token pieces (whose byte tokens may split a character) into valid UTF-8 text.
#include <string>

namespace kvsieve {

/// Buffers bytes until they form whole UTF-8 characters; a sequence that can no longer become valid is
/// replaced by U+FFFD (as the Unicode standard's "maximal subpart" practice). Used to stream generated text.
class Utf8Stream {
public:
    /// Appends bytes; returns the text that is complete so far.
    std::string push(const std::string& bytes);
    /// Returns what is left (an unfinished sequence becomes U+FFFD) and resets.
    std::string finish();

private:
    std::string pending_;
};

}  // namespace kvsieve
