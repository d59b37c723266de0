#pragma once
// What the model's forward pass needs from a KV cache: store a layer's new entries and attend over them.
#include <cstdint>

#include "kernels/rope_angles.h"

namespace kvsieve {

/// Views of one layer's tensors for the T tokens of a forward step (positions pos0 … pos0 + T − 1).
/// Row-major; head h of a [T][H·d] tensor is at offset h·d of each row.
struct LayerInputs {
    int layer = 0;
    int64_t pos0 = 0, T = 0;
    int n_head = 0, n_head_kv = 0, head_dim = 0, n_embd = 0;
    const float* hidden = nullptr;  ///< [T][D] attention input (after the input RMSNorm)
    const float* q_pre = nullptr;   ///< [T][Hq·d] queries before RoPE (after QK-norm for Qwen3)
    const float* k_pre = nullptr;   ///< [T][Hkv·d] keys before RoPE (after QK-norm for Qwen3)
    const float* q = nullptr;       ///< [T][Hq·d] queries after RoPE
    const float* k = nullptr;       ///< [T][Hkv·d] keys after RoPE
    const float* v = nullptr;       ///< [T][Hkv·d] values
    RopeAngles rope;                ///< the rotation that made q and k from q_pre and k_pre
};

/// A sequence's KV cache as the forward pass sees it.
class SequenceCache {
public:
    virtual ~SequenceCache() = default;
    /// Position of the next token (tokens processed so far).
    virtual int64_t n_tokens() const = 0;
    /// Most positions the sequence may reach.
    virtual int64_t n_ctx() const = 0;
    /// Stores the layer's T new entries and writes the attention output [T][Hq·d] for its T queries
    /// (causal: query t sees every kept entry of an earlier position and the new entries up to itself).
    virtual void attend(const LayerInputs& in, float* out) = 0;
    /// Called after every layer of a forward step has run; the step covered positions pos0 … pos0 + T − 1.
    virtual void finish_step(int64_t pos0, int64_t T) = 0;
};

}  // namespace kvsieve
