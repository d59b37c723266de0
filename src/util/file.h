#pragma once
// Reading whole input files (corpora, configs) with errors that name the file.
#include <string>

namespace kvsieve {

/// The whole file as bytes. `what` names the file's role in errors ("corpus", "config", ...). Throws Error
/// "cannot open <what> '<path>'" if it cannot be read (naming `<path>.xz` and the rule that unpacks it when only
/// that compressed form exists: data/corpora/README.md) and "<what> '<path>' is empty" if it holds no bytes.
std::string read_whole_file(const std::string& path, const std::string& what);

/// Writes `text` to `path` (replacing it). Throws Error "cannot write '<path>'" if it cannot be written.
void write_text(const std::string& path, const std::string& text);

}  // namespace kvsieve
