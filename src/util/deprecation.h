#pragma once
// Deprecated spellings (a policy key or a command-line flag renamed so that each word has one meaning,
// docs/glossary.md): the old spelling keeps working for one release and prints one line to stderr the first time a
// process meets it.
#include <string>

namespace kvsieve {

/// Prints "warning: OLD is deprecated, use NEW" (and `note`, when given, after a colon) to stderr the first time this
/// process meets `old_spelling`; later calls with the same spelling print nothing. Thread-safe. Returns true when it
/// printed.
bool warn_deprecated(const std::string& old_spelling, const std::string& new_spelling, const std::string& note = "");

/// How many times warn_deprecated printed for `old_spelling` in this process (0 or 1).
int deprecation_warnings_printed(const std::string& old_spelling);

/// Forgets which spellings were met, so that the next use of each warns again (for tests of the warning itself).
void reset_deprecation_warnings();

}  // namespace kvsieve
