#pragma once
// A differentiable mirror of the engine's Llama-family forward (model/llama_model.h) in libtorch, for
// training. Same equations, same RoPE layout, same GGUF tensor names: weights load from and save to GGUF, and
// its logits equal the engine's (tests/test_train.cpp). Only src/train and its tests include this header.
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/model_config.h"
#include "text/vocab.h"
#include "train/gated_attention.h"

namespace kvsieve::train {

/// Tensors of one layer's attention, exposed to hooks and captures. B batch, T tokens, D model width,
/// Hkv KV heads, Hq query heads, d head size.
struct AttnTensors {
    torch::Tensor h;       ///< attention-input hidden state (after the input RMSNorm) [B, T, D]
    torch::Tensor k_pre;   ///< keys before RoPE (after k_norm on qwen3) [B, Hkv, T, d]
    torch::Tensor k_post;  ///< keys after RoPE [B, Hkv, T, d]
    torch::Tensor v;       ///< values [B, Hkv, T, d]
    torch::Tensor lse;     ///< per-query log-sum-exp of the scaled, biased, masked logits [B, Hq, T] (captures only;
                           ///< differentiable on the dense path, no gradient on the blocked one)
    torch::Tensor q_post;  ///< queries after RoPE [B, Hq, T, d] (captures only); logit = q·k / √d (+ bias)
};

/// Hooks into the attention of every layer. Each callback gets the layer index and that layer's tensors
/// (lse not yet set) and returns a tensor broadcastable to [B, H, T_q, T_k] with H = Hq or Hkv (a KV-head
/// tensor applies to every query head of its GQA group), or an undefined tensor for "none".
struct MirrorHooks {
    /// Additive bias on the attention logits (log space), e.g. log of a (0,1) keep gate (SP-KV eq. 3).
    std::function<torch::Tensor(int, const AttnTensors&)> attn_bias;
    /// Boolean keep-mask: false removes the key for that query (the causal mask is applied besides; a query
    /// always keeps itself so every row has one key).
    std::function<torch::Tensor(int, const AttnTensors&)> keep_mask;
    /// When set, receives every layer's tensors (with lse) after its attention.
    std::vector<AttnTensors>* capture = nullptr;
    /// Gated attention (train/gated_attention.h) instead of the dense path: returns the layer's per-key keep gate
    /// [B, Hkv, T] ∈ [0, 1], whose log biases the keys outside each query's `gate_window` (undefined: no gate).
    /// Blocked, so no [T, T] tensor per head is held in the forward or the backward. Cannot be combined with
    /// attn_bias or keep_mask (Error).
    std::function<torch::Tensor(int, const AttnTensors&)> key_gate;
    /// Eviction steps on the blocked path: returns exactly [B, Hkv, T] int64 (no broadcast), key j seen only by
    /// queries j … until[j] (gated_attention's `until`; the blocked form of a keep_mask from train/kvpop_mask.h
    /// eviction_keep_mask). Undefined: none. Implies the blocked path.
    std::function<torch::Tensor(int, const AttnTensors&)> key_until;
    GateWindow gate_window;
    /// Blocked attention without a gate (the dense twin of a gated run, long sequences); implied by key_gate and
    /// key_until.
    bool blocked = false;
    int64_t attn_block = 128;  ///< key and query block of the blocked path (tokens)
};

/// The model. Each parameter is registered under its GGUF name with dots as underscores ("blk.3.attn_q.weight" →
/// "blk_3_attn_q_weight"); gguf_tensors() gives the GGUF names. Linear weights are [out, in] row-major, the GGUF
/// layout.
class LlamaMirrorImpl : public torch::nn::Module {
public:
    /// Random initialisation (N(0, 0.02²), output projections scaled by 1/√(2L), norms 1), seeded by torch.
    explicit LlamaMirrorImpl(const ModelConfig& c, bool tied_output = true);

    /// tokens [B, T] int64 at positions pos0 … pos0+T−1 → logits [B, T, V] (F32).
    torch::Tensor forward(const torch::Tensor& tokens, const MirrorHooks& hooks = {}, int64_t pos0 = 0);
    /// Final hidden states (after output_norm) [B, T, D]; forward() = hidden() · outputᵀ.
    torch::Tensor hidden(const torch::Tensor& tokens, const MirrorHooks& hooks = {}, int64_t pos0 = 0);

    const ModelConfig& config() const { return c_; }
    bool tied_output() const { return tied_; }
    /// (GGUF tensor name, parameter) pairs, in GGUF order.
    std::vector<std::pair<std::string, torch::Tensor>> gguf_tensors() const;
    /// Count of trainable parameters.
    int64_t n_params() const;

private:
    struct Layer {
        torch::Tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, ffn_norm, w_gate, w_up, w_down;
    };
    torch::Tensor rope(const torch::Tensor& x, int64_t pos0) const;  // x [B, H, T, d]
    torch::Tensor rms(const torch::Tensor& x, const torch::Tensor& w) const;

    ModelConfig c_;
    bool tied_;
    torch::Tensor tok_embd_, output_norm_, output_, rope_freqs_;
    std::vector<Layer> layers_;
    std::vector<std::pair<std::string, torch::Tensor>> named_;
};
TORCH_MODULE(LlamaMirror);

/// Loads every tensor of a GGUF model (any weight type the engine reads, dequantized to F32). Throws Error for
/// an architecture the engine does not know or a missing or mis-shaped tensor.
LlamaMirror load_mirror(const std::string& gguf_path);

/// Metadata entries of a GGUF file, in order.
using GGUFMetadata = std::vector<std::pair<std::string, GGUFValue>>;

/// The tokenizer.* keys of a GGUF file (to give a trained model the tokenizer of the model it came from).
GGUFMetadata tokenizer_metadata(const std::string& gguf_path);
/// The tokenizer.* keys describing a vocabulary (e.g. one from train_bpe_vocab).
GGUFMetadata tokenizer_metadata(const Vocab& v);

/// Writes the mirror as an F32 GGUF: general.architecture and the hyperparameters from its config, then
/// `extra` (general.name, tokenizer.* …) in order, the model's tensors, then `predictors`: learned predictor
/// tensors by GGUF name (predict/predictor_tensors.h: blk.<layer>.<method>.<name>, shape outermost first), written
/// as F32. Throws Error on I/O failure or a predictor name that is not in that schema or collides with a model
/// tensor.
void save_mirror(LlamaMirror& m, const std::string& path, const GGUFMetadata& extra,
                 const std::map<std::string, torch::Tensor>& predictors = {});

}  // namespace kvsieve::train
