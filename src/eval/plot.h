#pragma once
// Plots: each report writes its data (.dat) and a gnuplot script (.gp) and renders the PNG when gnuplot is
// installed, so the figure can always be made again from what was written.
#include <cstddef>
#include <string>

namespace kvsieve {

/// Writes `script` to DIR/STEM.gp and, if gnuplot is on the PATH, runs it in DIR (the script names its own PNG);
/// without gnuplot a note says so on stderr, once per process.
/// Returns true when a PNG was rendered; a gnuplot failure is reported on stderr, not thrown. Throws Error if the
/// script cannot be written.
bool render_gnuplot(const std::string& dir, const std::string& stem, const std::string& script);

/// gnuplot style of the i-th curve of a plot (" lc rgb '#rrggbb' dt D pt P", to append after `with lines...`):
/// 10 colours (a colour-blind-safe qualitative palette), each round of them with its own dash type and point
/// type, so the first 40 curves of a plot all differ (gnuplot's default cycle repeats after 8).
std::string series_style(size_t i);

}  // namespace kvsieve
