#include "util/file.h"

#include <fstream>
#include <iterator>

#include "util/error.h"

namespace kvsieve {

std::string read_whole_file(const std::string& path, const std::string& what) {
    std::ifstream f(path, std::ios::binary);
    require(f.good(), "cannot open ", what, " '", path, "'");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    require(!f.bad(), "cannot read ", what, " '", path, "'");
    require(!s.empty(), what, " '", path, "' is empty");
    return s;
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    require(f.good(), "cannot write '", path, "'");
    f << text;
    require(f.good(), "cannot write '", path, "'");
}

}  // namespace kvsieve
