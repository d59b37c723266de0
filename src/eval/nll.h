#pragma once
// Negative log-likelihood of text under a KV cache policy (LongPPL-style NLL vs density).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvsieve {

class LlamaModel;
class Tokenizer;

/// How the text is fed.
enum class NllProtocol {
    /// SP-KV (Self-Pruned KV Attention) App. A.2: each window is processed in chunks of `chunk` tokens with
    /// compression after every chunk; the policy keeps `sinks` first and `window` most recent positions
    /// (defaults 4 and 128); NLL over every predicted token of the window.
    kChunked,
    /// Prefill the first `prefix` tokens of each window in one batch, compress once, then decode the rest
    /// teacher-forced one token at a time; NLL over the continuation only.
    kPlain,
};

struct NllOptions {
    NllProtocol protocol = NllProtocol::kChunked;
    int64_t sample_tokens = 512;  ///< tokens per evaluation window (BOS included)
    int64_t samples = 8;          ///< windows, taken one after another from the start of the corpus
    int64_t chunk = 16;           ///< chunked protocol: chunk size
    int sinks = 4;                ///< chunked protocol: protected first positions
    int window = 128;             ///< chunked protocol: protected recent positions
    int64_t prefix = -1;          ///< plain protocol: prompt length (−1: half the window)
    std::string kv_type = "f16";  ///< KV element types, parse_kv_types spec: "f16", "q8_0", or keys/values "q8_0/f16"
    std::string kv_rotate =
        "auto";  ///< rotation of the stored entries: auto, on, off (cache/kv_rotation.h KVRotateMode)
    bool progress = true;
};

/// Per-window and mean results.
struct NllResult {
    std::string policy;
    std::vector<double> nll;          ///< mean NLL (nats/token) of each window
    std::vector<double> density;      ///< density ρ of each window's cache at its end
    std::vector<double> compression;  ///< compression ratio of each window's cache at its end
    /// [L][Hkv] density of each (layer, KV head) at the end of a window (kept / a full cache's entries beyond the
    /// window), averaged over the windows.
    std::vector<std::vector<double>> head_density;
    /// KV bytes of each window's cache at its end (pages in use at the stored row sizes, KVStats::kv_bytes_final)
    /// per position, and as a fraction of a full F16 cache of the same positions (KVStats::kv_bytes_full).
    std::vector<double> kv_bytes_per_token, kv_bytes_vs_full_f16;
    double mean_nll = 0, ppl = 0, mean_density = 0, mean_compression = 0;
    double mean_kv_bytes_per_token = 0, mean_kv_bytes_vs_full_f16 = 0;
    int64_t tokens = 0;  ///< predicted tokens in all windows
    nlohmann::json to_json() const;
};

/// Tokenizes `corpus_text` and evaluates `policy_spec` on `samples` windows. Throws Error for an empty
/// corpus, a corpus shorter than one window, or a window longer than the model's context.
NllResult evaluate_nll(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus_text,
                       const std::string& policy_spec, const NllOptions& o);

}  // namespace kvsieve
