#pragma once
// Retrieval heads from a calibration set (the static baseline of WG-KV's Fig. 7, DuoAttention-style: Xiao et al.
// 2024 keep a full cache in "retrieval heads" and only sinks + a recent window in "streaming heads"). A head's
// long-range attention mass is how much of its softmax weight its queries put outside their local window; the heads
// with the most are the global heads of a static hybrid layout (policy/hybrid_heads.cpp). DuoAttention learns its
// head gates by optimisation on passkey data; ranking by measured long-range mass is our simpler stand-in.
#include <cstdint>
#include <string>

#include "eval/head_density.h"

namespace kvsieve {

class LlamaModel;
class Tokenizer;

/// Long-range attention mass per (layer, KV head) ∈ [0, 1]: for every query at position i ≥ window of `samples`
/// windows of `length` tokens (BOS, then consecutive tokens of `text`, as the NLL evaluation takes them), the softmax
/// weight on keys j ≤ i − window (outside its local window) with j ≥ sinks (sink tokens are kept by every layout,
/// so their mass does not count), averaged over those queries, the G query heads of the KV head and the windows.
/// Dense causal attention of the full model, one prefill per window. Throws Error for window ≥ length, a text
/// shorter than one window, or length beyond the model's context.
HeadDensityMap long_range_attention_mass(const LlamaModel& model, const Tokenizer& tok, const std::string& text,
                                         int64_t length, int64_t samples, int window, int sinks, bool progress);

/// `kvsieve eval retrieval-heads`: the map above, written to OUT/retrieval_heads.{md,json,dat,png}, and the
/// hybrid_heads spec whose global heads are the n_global heads of most long-range mass (OUT/policy.txt). Returns
/// the markdown table followed by the spec.
std::string retrieval_heads_report(const LlamaModel& model, const Tokenizer& tok, const std::string& text,
                                   int64_t length, int64_t samples, int window, int sinks, int n_global,
                                   const std::string& out_dir, bool progress);

}  // namespace kvsieve
