#include "session/prefill_plan.h"

#include <algorithm>

#include "kernels/matmul.h"
#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

int64_t planned_chunk(const Policy& policy, int64_t chunk, bool compress, bool during) {
    require(chunk >= 0, "the prefill chunk must be ≥ 0, got ", chunk);
    return chunk_overruled(policy, chunk, compress, during) ? 0 : chunk;
}

bool chunk_overruled(const Policy& policy, int64_t chunk, bool compress, bool during) {
    if (chunk <= 0 || !compress) return false;
    if (policy.after_prefill) return true;
    return !during && policy.scorer != nullptr && policy.scorer->step() != nullptr;
}

PrefillChunk next_prefill_chunk(int64_t n_prompt, int64_t done, int64_t chunk) {
    require(done >= 0 && done < n_prompt, "no prompt tokens left to feed: ", done, " of ", n_prompt, " are fed");
    require(chunk >= 0, "the prefill chunk must be ≥ 0, got ", chunk);
    PrefillChunk c;
    c.begin = done;
    c.end = chunk > 0 ? std::min(n_prompt, done + chunk) : n_prompt;
    // A short rest joins this piece: rows of a product under kGemmMinTokens take the GEMV path, whose activations are
    // quantized (Q8_0 / Q8_1 for quantized weights), where one batch computes the same rows through SGEMM in float32.
    if (chunk >= kGemmMinTokens && n_prompt - c.end < kGemmMinTokens) c.end = n_prompt;
    c.last = c.end == n_prompt;
    return c;
}

}  // namespace kvsieve
