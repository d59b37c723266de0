#pragma once
// One layer's tensors in a forward step, as views: what the KV cache attends with (cache/sequence_cache.h) and what
// the scorers read (policy/scorer.h).
#include <cstdint>

#include "kernels/rope_angles.h"

namespace kvsieve {

/// Whether a forward step is a prefill step (a prompt, a chunk of one, or tokens fed as context: T ≥ 1 tokens, each
/// attending to the kept entries and causally to the step's own) or a decode step (the one token after the last,
/// attending over the cache's pages). The caller of the forward pass says which (LlamaModel::forward); a session's
/// step kinds map onto it (Session::StepKind: a decode step is kDecode, every other kind kPrefill). A decode step of
/// T ≠ 1 tokens is an error.
enum class StepPhase { kPrefill, kDecode };

/// Views of one layer's tensors for the T tokens of a forward step (positions pos0 … pos0 + T − 1).
/// Row-major; head h of a [T][H·d] tensor is at offset h·d of each row.
struct LayerInputs {
    int layer = 0;
    int64_t pos0 = 0, T = 0;
    StepPhase phase = StepPhase::kPrefill;  ///< the kind of step, as the forward pass's caller said
    int n_head = 0, n_head_kv = 0, head_dim = 0, n_embd = 0;
    const float* hidden = nullptr;  ///< [T][D] attention input (after the input RMSNorm)
    const float* q_pre = nullptr;   ///< [T][Hq·d] queries before RoPE (after QK-norm for Qwen3)
    const float* k_pre = nullptr;   ///< [T][Hkv·d] keys before RoPE (after QK-norm for Qwen3)
    const float* q = nullptr;       ///< [T][Hq·d] queries after RoPE
    const float* k = nullptr;       ///< [T][Hkv·d] keys after RoPE
    const float* v = nullptr;       ///< [T][Hkv·d] values
    RopeAngles rope;                ///< the rotation that made q and k from q_pre and k_pre
};

}  // namespace kvsieve
