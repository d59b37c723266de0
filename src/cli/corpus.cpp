#include "cli/corpus.h"

#include <fstream>
#include <sstream>

namespace kvsieve::cli {

std::string read_corpus_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open corpus '", path, "'");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace kvsieve::cli
