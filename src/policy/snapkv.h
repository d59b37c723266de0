#pragma once
// SnapKV's scores, shared by the snapkv and pyramidkv presets.
#include <vector>

#include "policy/params.h"
#include "policy/scorer.h"

namespace kvsieve {

/// SnapKV (Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation", §4.2, eq. 2–3),
/// as kvpress SnapKVPress computes it: the softmax weights of the last `window` queries (causal) on the keys
/// before the window, averaged over those queries, smoothed by a 1-D average pool of width `kernel`
/// (zero-padded, divided by `kernel`), averaged over the G query heads of each KV head; the window's own keys
/// get (max over the layer) + 1. A chunk of T ≤ window tokens (chunked prefill) observes with its last T − 1
/// queries; a single token leaves every score at 1.
void snapkv_scores(const StepEvent& ev, int window, int kernel, const std::vector<float*>& scores);

/// The keys of SnapKV's scores, shared by snapkv and pyramidkv: obs_window (observation window, 64; deprecated alias
/// window_size) and kernel (pooling width, odd, 5).
std::vector<ParamDecl> snapkv_params();

}  // namespace kvsieve
