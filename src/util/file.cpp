#include "util/file.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "util/error.h"

namespace kvsieve {

std::string read_whole_file(const std::string& path, const std::string& what) {
    std::ifstream f(path, std::ios::binary);
    if (!f.good()) {
        std::error_code ec;
        // A corpus whose compressed form is tracked but not yet unpacked (data/corpora/README.md).
        require(!std::filesystem::exists(path + ".xz", ec), "cannot open ", what, " '", path, "': only '", path,
                ".xz' is there; configuring the build (bash scripts/build.sh) unpacks every data/corpora/NAME.xz to "
                "NAME beside it, as does `xz -dk ",
                path, ".xz` (the rule: data/corpora/README.md)");
        fail("cannot open ", what, " '", path, "'");
    }
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
