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
            std::fprintf(stderr,
                         "note: gnuplot is not installed: %s.gp and its data are written, the PNG is not "
                         "(apt-get install gnuplot-nox, then run gnuplot in that directory)\n",
                         stem.c_str());
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

std::string series_style(size_t i) {
    // Paul Tol's "muted" qualitative scheme plus black and grey: distinct under the common colour-vision deficiencies.
    static const char* const kColours[] = {"#332288", "#88CCEE", "#44AA99", "#117733", "#999933",
                                           "#DDCC77", "#CC6677", "#882255", "#AA4499", "#000000"};
    constexpr size_t n = sizeof(kColours) / sizeof(kColours[0]);
    const size_t round = i / n;
    return std::string(" lc rgb '") + kColours[i % n] + "' dt " + std::to_string(1 + round % 4) + " pt " +
           std::to_string(1 + (i + round) % 13);
}

}  // namespace kvsieve
