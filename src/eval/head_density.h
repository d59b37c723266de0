#pragma once
// Where a learned policy keeps its KV entries, per (layer, KV head), and the hybrid local/global design it
// suggests (SP-KV §4, Szilvasy, Faysse et al.): choose the n densest heads as global and make the others local,
// then compare that layout with fixed ones at the same number of global heads.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvsieve {

class LlamaModel;
class Tokenizer;
struct NllOptions;

/// Density ρ per (layer, KV head): the fraction of the entries beyond the local window that the head keeps
/// (SP-KV eq. 8), averaged over the evaluation windows. density[l][h] ∈ [0, 1].
struct HeadDensityMap {
    std::vector<std::vector<double>> density;
    int n_layer() const { return static_cast<int>(density.size()); }
    int n_head_kv() const { return density.empty() ? 0 : static_cast<int>(density[0].size()); }
    double mean() const;
};

/// A (layer, KV head) pair.
using HeadId = std::pair<int, int>;

/// How the global heads of a hybrid layout are chosen.
enum class HybridStrategy {
    kDensest,      ///< the n densest heads of the map (SP-KV §4)
    kEvery4From0,  ///< strategy A: whole layers 0, 4, 8, … global (3 local : 1 global from layer 0)
    kEvery4From3,  ///< strategy B: whole layers 3, 7, 11, … global (3 local : 1 global, the first global at 3)
    kRandom,       ///< strategy C: n heads drawn uniformly (seeded)
};
const char* hybrid_strategy_name(HybridStrategy s);

/// The global heads of a strategy, sorted. kDensest and kRandom take n heads (ties: lower layer, then head);
/// the layer patterns take every head of their layers and ignore n. Throws Error if n is outside [0, L·Hkv].
std::vector<HeadId> hybrid_global_heads(const HeadDensityMap& m, HybridStrategy s, int n, uint64_t seed = 1);

/// Density coverage of a layout: Σ density of its global heads / Σ density of all heads (1 when the map is all
/// zero): how much of what the learned policy keeps the static layout keeps too.
double density_coverage(const HeadDensityMap& m, const std::vector<HeadId>& global);

/// The policy spec of a layout: "hybrid_heads:global=l.h/l.h/…,window=W,sinks=S" (policy/hybrid_heads.cpp).
std::string hybrid_policy_spec(const std::vector<HeadId>& global, int window, int sinks);

/// Writes DIR/STEM.md (`what` the values are, then a table: one row per layer, one column per KV head, and the layer
/// mean), DIR/STEM.json, DIR/STEM.dat and a gnuplot heatmap DIR/STEM.png (layer × KV head, colour = value in
/// [0, 1]). Throws Error on I/O failure.
void write_head_density(const std::string& dir, const std::string& stem, const std::string& title,
                        const HeadDensityMap& m,
                        const std::string& what =
                            "Density ρ per layer and KV head (fraction of the entries beyond "
                            "the local window kept)");

/// `kvsieve eval density`: evaluates `policy` on `text` (evaluate_nll with `o`), writes its map to
/// OUT/head_density.{md,json,dat,png}; with `hybrid`, also evaluates the full cache, every-head-local, and the
/// hybrid layouts (densest, A, B, C; n_global heads for densest and C, −1: as many as A has) under the policy's
/// window and sinks, and writes OUT/hybrid.md (global heads, density coverage, density, NLL, ΔNLL vs full) and
/// OUT/hybrid.json. Returns the markdown written. Throws Error as evaluate_nll does, or for n_global out of range.
std::string head_density_report(const LlamaModel& model, const Tokenizer& tok, const std::string& text,
                                const std::string& policy, const NllOptions& o, const std::string& out_dir, bool hybrid,
                                int n_global, uint64_t seed);

}  // namespace kvsieve
