#pragma once
// Plots: each report writes its data (.dat) and a gnuplot script (.gp) and renders the PNG when gnuplot is
// installed, so the figure can always be made again from what was written.
#include <string>

namespace kvsieve {

/// Writes `script` to DIR/STEM.gp and, if gnuplot is on the PATH, runs it in DIR (the script names its own PNG);
/// without gnuplot a note says so on stderr, once per process.
/// Returns true when a PNG was rendered; a gnuplot failure is reported on stderr, not thrown. Throws Error if the
/// script cannot be written.
bool render_gnuplot(const std::string& dir, const std::string& stem, const std::string& script);

}  // namespace kvsieve
