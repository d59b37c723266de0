#pragma once
// What the model's forward pass needs from a KV cache: store a layer's new entries and attend over them.
#include <cstdint>

#include "policy/layer_inputs.h"

namespace kvsieve {

/// A sequence's KV cache as the forward pass sees it.
class SequenceCache {
public:
    virtual ~SequenceCache() = default;
    /// Position of the next token (tokens processed so far).
    virtual int64_t n_tokens() const = 0;
    /// Most positions the sequence may reach.
    virtual int64_t n_ctx() const = 0;
    /// Stores the layer's T new entries and writes the attention output [T][Hq·d] for its T queries
    /// (causal: query t sees every kept entry of an earlier position and the new entries up to itself); in.phase
    /// says whether the step is a prefill or a decode step.
    virtual void attend(const LayerInputs& in, float* out) = 0;
    /// Called after every layer of a forward step has run; the step covered positions pos0 … pos0 + T − 1 and was
    /// of the kind `phase` (the same as every layer's LayerInputs::phase).
    virtual void finish_step(int64_t pos0, int64_t T, StepPhase phase) = 0;
};

}  // namespace kvsieve
