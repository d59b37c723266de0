#pragma once
// The one prefill chunk planner: how a prompt of n tokens is cut into the pieces a prefill feeds, for every caller
// (the CLI's --prefill-chunk, the evaluations and the server's batched steps, which feed one piece per step).
//
// The rule for a policy with an after-prefill step (Policy::after_prefill, e.g. KVzip's context reconstruction):
// its prompt is fed in one piece whatever chunk size is asked, everywhere. The step scores every cached entry
// against the whole context, so no compression may run before the prompt is complete; feeding it in one piece is
// the policy's own protocol (prefill, then score, then compress), and it is what the server has always done for
// such requests, whose chunk size is the operator's scheduling setting rather than the client's choice, so an
// error there would refuse requests for a setting the client cannot change. The after-prefill step is never skipped.
#include <cstdint>

namespace kvsieve {

struct Policy;

/// One piece of a prompt: its tokens [begin, end); `last` when it ends the prompt (the prefill then ends with the
/// after-prefill step and the compression, session/prefill.h finish_prefill).
struct PrefillChunk {
    int64_t begin = 0, end = 0;
    bool last = false;
};

/// The chunk size a prompt is really fed in under `policy` when `chunk` tokens per forward are asked (0: one
/// batch) and the policy compresses after each piece (`compress`, PrefillPlan::compress): 0 (one piece) for a
/// policy with an after-prefill step that compresses, else `chunk`. Throws Error for chunk < 0.
int64_t planned_chunk(const Policy& policy, int64_t chunk, bool compress = true);

/// Whether asking `chunk` under `policy` is overruled by the rule above (the caller may say so to its user).
bool chunk_overruled(const Policy& policy, int64_t chunk, bool compress = true);

/// The next piece of a prompt of n_prompt tokens of which `done` are fed, in chunks of `chunk` tokens (0: the rest
/// in one piece). Throws Error unless 0 ≤ done < n_prompt and chunk ≥ 0.
PrefillChunk next_prefill_chunk(int64_t n_prompt, int64_t done, int64_t chunk);

}  // namespace kvsieve
