#pragma once
// The leaderboard: sweep directories (eval sweep, kvpress's layout) collected into one table per model and a
// score-vs-compression plot, as kvpress's leaderboard presents its presses.
#include <string>
#include <vector>

namespace kvsieve {

/// One cell of a sweep.
struct LeaderboardRow {
    std::string model;   ///< the model file's name
    std::string sweep;   ///< the sweep directory's name (its last path component)
    std::string task;    ///< "ruler" or "nll"
    std::string policy;  ///< the cell's spec
    std::string method;  ///< the preset (spec up to ':'), the checkpoint of its model= and its rule= when it has them
    double compression = 0;  ///< mean compression ratio
    double density = 1;      ///< mean density ρ
    double value = 0;        ///< RULER: score 0–100; NLL: nats/token
    double ci95 = 0;         ///< half-width of the 95% interval of `value` (normal approximation over samples)
    double full = 0;         ///< the same sweep's full-cache value
    /// Δ vs full: RULER in score points (value − full), NLL in percent of the full NLL (100 · (value − full) / full).
    double delta = 0;
    /// Half-width of the 95% interval of `delta` paired over samples: every cell of a sweep runs the same examples, so
    /// the per-sample differences d_i = x_i − full_i give 1.96 · sd(d) / √n (in the units of `delta`), much tighter than
    /// the two cells' own intervals. NaN when the cell's samples are not all in the full cell (nothing to pair with).
    double delta_ci95 = 0;
    int64_t samples = 0;
    bool query_aware = false;  ///< RULER protocol (cells written before it was recorded count as query-aware)
    /// RULER prompt format, "raw" or "chat" (eval/ruler_prompt.h; cells written before it was recorded are raw).
    std::string format = "raw";
};

/// Reads every cell (<dir>/<cell>/{config.yaml, metrics.json, predictions.csv}) of the sweep directories. RULER
/// samples of the tasks in `exclude_tasks` (e.g. tasks at chance with the full cache) are left out of every value:
/// score, interval, Δ, compression ratio and density are then the means over the remaining samples of
/// predictions.csv, and `samples` counts those. Throws Error naming a directory with no cells, a cell whose files
/// cannot be read, a sweep without its full-cache cell, or an excluded task that no RULER cell has (a misspelling).
std::vector<LeaderboardRow> collect_leaderboard(const std::vector<std::string>& dirs,
                                                const std::vector<std::string>& exclude_tasks = {});

/// Writes <out>/leaderboard.md (per model and task, RULER tables also per protocol and prompt format, so that raw and
/// chat-format cells never share a table or a plot; the heading names both, e.g. "ruler, query-agnostic, chat
/// prompts": rows sorted by method then compression, value ± 95% interval,
/// Δ vs full ± its paired 95% interval, and for RULER the highest compression ratio at which each method keeps ≥ 95%
/// of the full score, by the point estimate and by the lower end of the paired interval) and per model
/// a gnuplot script and PNG (score_vs_compression_<model>.png, with _chat before the extension for chat-format
/// tables, if gnuplot is installed). Returns the markdown.
/// `exclude_tasks` (as given to collect_leaderboard) is named under each RULER table.
std::string write_leaderboard(const std::vector<LeaderboardRow>& rows, const std::string& out_dir,
                              const std::vector<std::string>& exclude_tasks = {});

}  // namespace kvsieve
