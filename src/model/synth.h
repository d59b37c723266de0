#pragma once
// Random-weight GGUF models of real shapes, for measuring speed without downloads.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor_types.h"

namespace kvsieve {

/// The shape of a model family member.
struct SynthShape {
    std::string name;
    std::string arch;  ///< "llama", "qwen2" or "qwen3"
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int64_t n_ctx;
    float rope_base;
    bool tied;
};

/// Named shapes: "qwen3-0.6b" (28 layers, D 1024, 16/8 heads, d 128, ff 3072, vocab 151936, tied),
/// "llama-3.2-1b", "qwen2.5-0.5b", and "tiny-qwen3" (a 2-layer toy for tests).
const std::vector<SynthShape>& synth_shapes();
/// Throws Error listing the known names if `name` is not one.
const SynthShape& synth_shape(const std::string& name);

/// Writes a GGUF with that shape: matrices N(0, 0.02²)-like (uniform with that variance) in `type`
/// (F32, F16, BF16, Q8_0 or Q4_0), norm weights 1, F32 biases 0; a SentencePiece-style byte-fallback
/// vocabulary of n_vocab entries. Deterministic for a seed. Prints nothing; throws Error on I/O failure.
void write_synth_model(const std::string& path, const SynthShape& s, TensorType type, uint64_t seed);

}  // namespace kvsieve
