#pragma once
// The language-model losses and evaluations every trainer shares: weighted next-token cross-entropy, held-out
// NLL of text windows, and teacher-forced answer accuracy.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "train/data.h"
#include "train/mirror.h"

namespace kvsieve::train {

/// Weighted cross-entropy (nats per weighted target token) of logits [B, T, V] predicting tokens[:, 1:] ([B, T]
/// int64), with weights w [B, T] float (w[:, t] weighs the target at t; the first column is unused).
torch::Tensor weighted_ce(const torch::Tensor& logits, const torch::Tensor& tokens, const torch::Tensor& w);

/// Teacher-forced answer tokens of `s` from `answer_begin` to before its final EOS: (predicted correctly, count).
/// All correct is the same as greedy decoding producing the answer exactly.
std::pair<int64_t, int64_t> answer_hits(LlamaMirror& model, const Sequence& s, int64_t answer_begin,
                                        const MirrorHooks& hooks = {});

/// Teacher-forced greedy predictions of `s` in one forward: element i is 1 iff the argmax after tokens[0..i] is
/// tokens[i + 1] (size tokens − 1).
std::vector<uint8_t> next_token_hits(LlamaMirror& model, const Sequence& s, const MirrorHooks& hooks = {});

/// (correct, total) of next_token_hits() `hits` of `s` over the tokens whose weight is > 0. Throws Error if the
/// sizes disagree.
std::pair<int64_t, int64_t> weighted_hits(const Sequence& s, const std::vector<uint8_t>& hits);

/// Mean NLL (nats/token) of `count` held-out windows of `window` tokens of each text of `stream`, as
/// {"nll_<name>": value} with names[i] the i-th text's name; texts without a window are left out. `hooks` apply
/// to every forward (e.g. SP-KV's gates).
nlohmann::json heldout_nll(LlamaMirror& model, const TextStream& stream, const std::vector<std::string>& names,
                           int64_t window, int64_t count, const MirrorHooks& hooks = {});

/// The density of a gated model's evaluation: `per_layer` holds, for each forward in turn, each layer's [Hkv] density
/// (fraction of the gated keys kept), layer-major. Returns {"density": overall mean, "head_density": [L][Hkv] means
/// over the forwards} (Figure 5's per-head trajectories, one point per evaluation).
nlohmann::json gate_density_json(const std::vector<torch::Tensor>& per_layer, int64_t n_layer, int64_t n_head_kv);

}  // namespace kvsieve::train
