#pragma once
// One prompt into several fresh sequences at the price of one forward pass: the weight products (the bulk of a
// prefill) run once, every cache stores the layer's entries and attends with its own policy. Valid because a policy
// whose prefill is the dense causal one (kvpress's protocol: compress after the prefill) gives every cache the same
// attention output over a fresh cache, so every layer's input is the same for all of them. It is what lets a sweep
// of many policies over the same prompts pay for each prompt's prefill once.
#include <cstdint>
#include <vector>

namespace kvsieve {

class Session;
struct Policy;

/// Whether `p`'s prefill of a fresh cache in one batch is the dense causal attention (true for every policy but
/// those with a gated prefill, Policy::gated_prefill: SP-KV, WG-KV, hybrid_heads, kvzap:sparse_prefill=1, whose
/// queries see only their window and the admitted keys).
bool shares_dense_prefill(const Policy& p);

/// Feeds `prompt` in one batch to every session in `sessions` (each fresh: an empty cache; distinct caches), then
/// ends each one's prefill as Session::prefill does (the policy's after-prefill step, e.g. KVzip's replay, then its
/// compression; an after-prefill step runs once for all the sessions whose policies share its key,
/// Policy::after_prefill_key, and whose caches have the same element type and context, e.g. KVzip at several ratios). Equivalent to sessions[i]->prefill(prompt, {}, logits) for each i: the first cache computes the
/// attention output, the others run as shadows (session/shared_prefill_cache.h: entries, scores and the statistics
/// their policies read, no output), since over a fresh cache the dense causal attention is the same for all.
/// `logits` becomes the last prompt token's [n_vocab] (the same for every session). Throws Error for no sessions, an
/// empty prompt or one beyond a context, a session that is not fresh, two sessions over one cache, sessions of
/// different models, or a policy whose prefill is not dense (shares_dense_prefill), before any work; an error during
/// the work leaves every session empty. Caches whose policies read the same attention statistic over the same keys
/// compute it once (attend/prefill_stat_share.h: H2O or TOVA at several ratios); returns how many (layer, KV head)
/// statistics a cache took from another instead of computing them.
int64_t prefill_shared(const std::vector<Session*>& sessions, const std::vector<int32_t>& prompt,
                       std::vector<float>& logits);

}  // namespace kvsieve
