#pragma once
// What a policy keeps after a prompt's prefill, head by head: the positions and scores each (layer, KV head) holds,
// for comparing kvsieve's decisions with another implementation's (tools/kvpress_crosscheck.py).
#include <cstdint>
#include <string>
#include <vector>

namespace kvsieve {

class LlamaModel;

/// The entries one (layer, KV head) holds: positions ascending, each with the score the policy gave it.
struct HeadKept {
    int layer = 0, head = 0;
    std::vector<int32_t> positions;
    std::vector<float> scores;  ///< scores[i] belongs to positions[i] (the policy's units; higher = kept first)
};

/// Prefills `ids` in one piece through Session::prefill (one forward batch, then the policy's after-prefill step, e.g.
/// KVzip's replay with the tokenizer of the model's GGUF, and its compression rule, as the RULER protocol does after
/// the context, or after context and question with --query-aware) into a cache of `policy_spec` whose keys and values
/// are stored as `kv_types` says (parse_kv_types: "f32", "f16", "bf16", "q8_0", "q4_0", "K/V" for two types, with
/// "@admission" to quantize when an entry leaves the window) and rotated as `kv_rotate` says ("auto", "on", "off":
/// KVRotation::choose), and returns every head's entries, layer-major ([L × H_kv], head fastest). Scores are computed
/// from the stored (dequantized) entries, as every reader of a quantized cache sees them. With ratio=0 a scoring
/// policy keeps every position, so its scores are those of the whole prompt. Throws Error for an empty prompt, one
/// beyond the model's context, a model whose GGUF holds no tokenizer, a policy spec that does not parse, an unknown
/// KV type or rotation, or a quantized type the model's head dimension cannot take.
std::vector<HeadKept> kept_after_prefill(const LlamaModel& model, const std::vector<int32_t>& ids,
                                         const std::string& policy_spec, const std::string& kv_types,
                                         const std::string& kv_rotate);

}  // namespace kvsieve
