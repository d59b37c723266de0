#pragma once
// Which per-key attention statistic a step scorer asks the attention kernels for.
#include "kernels/attention.h"
#include "policy/scorer.h"

namespace kvsieve {

/// The kernels' KeyStat for a step scorer's AttnStat: kSum for AttnStat::kMassSum (Σ over the step's queries of
/// each key's softmax weight, H2O), kLast for kMassLast (the last query's weights, TOVA), kNone for no scorer or a
/// scorer that reads no attention weights.
inline KeyStat key_stat(const StepScorer* s) {
    if (!s) return KeyStat::kNone;
    switch (s->stat()) {
        case AttnStat::kMassSum: return KeyStat::kSum;
        case AttnStat::kMassLast: return KeyStat::kLast;
        default: return KeyStat::kNone;
    }
}

}  // namespace kvsieve
