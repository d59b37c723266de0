#include "policy/scorer.h"

#include <cmath>

namespace kvsieve {

void StepScorer::score_decode(const StepEvent& e, const std::vector<float*>& scores) const {
    for (size_t h = 0; h < e.heads.size(); ++h) scores[h][e.heads[h].n - 1] = INFINITY;
}

}  // namespace kvsieve
