#pragma once
// The one prefill chunk planner: how a prompt of n tokens is cut into the pieces a prefill feeds, for every caller
// (the CLI's --prefill-chunk, the evaluations and the server's batched steps, which feed one piece per step).
//
//
// A prompt keeps the same entries whatever its pieces (docs/architecture.md, "Where compression happens"): the
// policy's compression points are the prompt's end, not the pieces' (KVCache::hold_admission, end_prefill), and a
// piece attends to every earlier piece of the prompt as one batch would. Two kinds of policy are fed in one piece
// whatever chunk size is asked, everywhere:
//   - a step scorer (policy/scorer.h StepScorer: SnapKV, H2O, TOVA, expected attention, …) rescores every entry from
//     the attention of the piece's own queries, so scores computed piece by piece are not one batch's (SnapKV's
//     observation window would be the last piece's queries); one piece is its own protocol (kvpress: prefill, score,
//     compress);
//   - a policy with an after-prefill step (Policy::after_prefill, KVzip's context reconstruction), which scores the
//     whole context once it is in the cache: its scores (a replay over the cache) are those of one batch only up to
//     rounding, and it cannot compress before the prompt is complete.
// Under compress_during_prefill (memory-bounded prefill, off by default) a step scorer is fed in chunks again,
// rescoring and compressing after each.
// The server's chunk size is the operator's scheduling setting rather than the client's choice, so a prompt is fed
// in one piece there too rather than refused.
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
/// batch), the prefill compresses (`compress`, PrefillPlan::compress) and, with `during`, compresses after each
/// piece (KVCache::set_compress_during_prefill): 0 (one piece) for the policies of the rule above, else `chunk`.
/// Throws Error for chunk < 0.
int64_t planned_chunk(const Policy& policy, int64_t chunk, bool compress = true, bool during = false);

/// Whether asking `chunk` under `policy` is overruled by the rule above (the caller may say so to its user).
bool chunk_overruled(const Policy& policy, int64_t chunk, bool compress = true, bool during = false);

/// The next piece of a prompt of n_prompt tokens of which `done` are fed, in chunks of `chunk` tokens (0: the rest
/// in one piece). For chunk ≥ kGemmMinTokens (32) a rest of fewer than 32 tokens after the piece joins it, so that
/// every row of the prompt takes the product path one batch takes (kernels/matmul.h: rows of a shorter product go
/// through GEMV with quantized activations). With a chunk that is a multiple of 256 tokens (kGemmTokenBlock, a
/// multiple of attention's kPrefillQueryBlock) every product then has one batch's shape and the prefill is one
/// batch's bit for bit; other sizes change the order of some sums (docs/architecture.md, "Where compression
/// happens"). Throws Error unless 0 ≤ done < n_prompt and chunk ≥ 0.
PrefillChunk next_prefill_chunk(int64_t n_prompt, int64_t done, int64_t chunk);

}  // namespace kvsieve
