#pragma once
// How a sweep's cells become the curves of its plot: cells of one preset and settings that differ in one swept
// value (ratio, τ, budget, capacity, …) are one curve; every other cell is a curve of its own.
#include <string>
#include <vector>

namespace kvsieve {

/// One curve of a sweep plot.
struct SweepCurve {
    std::string title;               ///< the preset's name, or its spec without the swept key where names repeat
    std::vector<std::string> cells;  ///< policy specs of its points, in the order given
};

/// Groups policy specs ("name:key=value,…", parts joined by '>' or '+', policy/spec_text.h) into curves. Two specs
/// share a curve when they have the same parts, names and keys, and their values differ in at most one key (the swept
/// one); a group whose values differ in several keys gives each spec its own curve. Curves follow their first spec's order. Titles: the first
/// part's name where no other curve has it (and it is not "full", whose reference point is no curve); otherwise the
/// spec without the swept key (the x axis shows it), or the whole spec for a curve of one cell. Quotes are dropped
/// from titles (gnuplot delimits them). "full" itself is no curve. Throws Error for a spec that split_policy_spec
/// refuses (a sweep's own specs have parsed before).
std::vector<SweepCurve> sweep_curves(const std::vector<std::string>& specs);

}  // namespace kvsieve
