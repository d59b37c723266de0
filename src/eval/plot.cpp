#include "eval/plot.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "util/file.h"

namespace kvsieve {

bool render_gnuplot(const std::string& dir, const std::string& stem, const std::string& script) {
    write_text((std::filesystem::path(dir) / (stem + ".gp")).string(), script);
    if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
        static bool said = false;  // once per process
        if (!said)
            std::fprintf(stderr, "note: gnuplot is not installed: %s.gp and its data are written, the PNG is not "
                                 "(apt-get install gnuplot-nox, then run gnuplot in that directory)\n", stem.c_str());
        said = true;
        return false;
    }
    const std::string cmd = "cd '" + dir + "' && gnuplot " + stem + ".gp";
    if (std::system(cmd.c_str()) != 0) {
        std::fprintf(stderr, "gnuplot failed; data and script are in %s\n", dir.c_str());
        return false;
    }
    return true;
}

}  // namespace kvsieve
