#include "policy/scorer.h"

#include <cmath>

namespace kvsieve {

void Scorer::score_decode(const DecodeScoreInput& in, float* scores) const { scores[in.n - 1] = INFINITY; }

void Scorer::score_decode_layer(const std::vector<DecodeScoreInput>& heads, const std::vector<float*>& scores) const {
    for (size_t h = 0; h < heads.size(); ++h) score_decode(heads[h], scores[h]);
}

}  // namespace kvsieve
