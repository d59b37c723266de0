#pragma once
// Sweeps: policies × compression ratios (or thresholds) × tasks, one result directory per cell in kvpress's
// layout, a markdown summary and plots.
#include <string>
#include <vector>

#include "eval/nll.h"
#include "eval/ruler.h"

namespace kvsieve {

struct SweepOptions {
    std::vector<std::string> policies;  ///< preset names, or full specs (NAME:key=value,...)
    std::vector<double> ratios;         ///< compression ratios; each becomes ratio=R (window for streaming_llm:window)
    std::vector<double> thresholds;     ///< τ values; each becomes rule=threshold,tau=T
                                        ///< (neither ratios nor thresholds: each policy is one cell, as written)
    /// Policies swept over `thresholds` alone, beside `policies` over `ratios` (one sweep, one prefill per example,
    /// for ratio-rule baselines and threshold-rule methods together). When non-empty, `thresholds` apply to these
    /// only; when empty, `ratios` and `thresholds` both apply to every entry of `policies`.
    std::vector<std::string> threshold_policies;
    std::string out_dir = "results";
    std::string model_path, corpus_path;
    NllOptions nll;
    RulerOptions ruler;
    /// RULER: unfinished cells run together in passes of this many (run_ruler_cells: one shared prefill per example
    /// for all of them), each cell's samples kept in its partial file as they come; 1: one cell at a time; 0: all.
    int64_t cells_per_pass = 0;
};

/// The policy spec of one cell: `policy` with param = value added to its preset ("ratio=R", or "rule=threshold,tau=T"
/// for param "tau"), before a read-time selection if the spec has one ("wgkv:…,rule=threshold,tau=0.1+quest:…").
std::string cell_spec(const std::string& policy, const char* param, double value);
/// Cell directory name, file-system safe.
std::string cell_name(const std::string& spec);

/// Runs every cell not already finished (metrics.json present), writing <out>/<cell>/{metrics.json,
/// config.yaml, predictions.csv}, then <out>/summary.md and, if gnuplot is installed, <out>/nll_vs_density.png.
/// The summary and the plot also list the cells that earlier sweeps into <out> finished under the same settings
/// (other policies), after this sweep's. Throws Error for a malformed sweep (no policies, a ratio outside [0, 1), a
/// cell spec that does not parse) before any work starts, and for a finished cell of this sweep made with other KV
/// cache types or --kv-rotate, or another protocol, window length or sample count (its config.yaml), naming both.
void run_nll_sweep(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus_text,
                   const SweepOptions& o);

/// The same for RULER-style tasks: metrics.json has score (0–100), compression_ratio, density and per-task
/// scores; <out>/summary.md and <out>/score_vs_compression.png. The unfinished cells run together
/// (o.cells_per_pass); an interrupted run resumes each cell from the samples in its <cell>/partial.jsonl, which is
/// removed once the cell's metrics are written. A finished cell or partial file made with another prompt format
/// (o.ruler.format; raw where none is recorded) is refused with an Error naming both formats, and a finished cell
/// made with other KV cache types or --kv-rotate likewise. Cells of other policies that earlier sweeps finished in
/// <out> are listed in the summary and the plot, as for NLL. With o.ruler.shards > 1 the run makes only its shard's examples
/// (one process per core, each with its own partial files, read_ruler_partial reads them all); a cell is written
/// by the run that finds every example made, and the summary only once every cell is (a run that leaves cells to
/// the other shards says so and writes none).
void run_ruler_sweep(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus_text,
                     const SweepOptions& o);

}  // namespace kvsieve
