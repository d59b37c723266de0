#pragma once
// Reading the text files given as --corpus.
#include <string>

#include "util/error.h"

namespace kvsieve::cli {

/// The whole file as bytes; throws Error "cannot open corpus '<path>'" if it cannot be read.
std::string read_corpus_file(const std::string& path);

}  // namespace kvsieve::cli
