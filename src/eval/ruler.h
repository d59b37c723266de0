#pragma once
// Running RULER-style tasks (eval/tasks.h) under a KV cache policy: greedy generation, string-match scores,
// density and compression ratio per sample.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvsieve {

class LlamaModel;
class Tokenizer;

struct RulerOptions {
    std::vector<std::string> tasks{"niah_single_1"};
    std::vector<int64_t> lengths{1024};
    int64_t samples = 10;   ///< examples per (task, length)
    uint64_t seed = 0;      ///< example i of a (task, length) uses seed + i; held-out data uses other seeds
    std::string kv_type = "f16";
    int64_t prefill_chunk = 0;  ///< 0: one batch
    /// false (default, kvpress and the KVzap paper's protocol): the context is prefilled and compressed, then the
    /// question is fed uncompressed and the answer generated; true: context and question are one prompt, compressed
    /// after the question was seen (query-aware).
    bool query_aware = false;
    /// Decode-time variant (query-agnostic only): after the context, the model generates this many tokens of its
    /// own (greedy, never an end-of-generation token) as decode steps — so a policy that evicts at decode time
    /// (a fixed budget) must keep the needle through a long generation — and only then gets the question. 0: none.
    int64_t decode_preamble = 0;
    bool progress = true;
};

struct RulerSample {
    std::string task;
    int64_t length = 0, index = 0;
    double score = 0;  ///< in [0, 1]
    double density = 1, compression_ratio = 0;
    std::string prediction;
    std::vector<std::string> answers;
};

struct RulerResult {
    std::string policy;
    bool query_aware = false;
    int64_t decode_preamble = 0;
    std::vector<RulerSample> samples;
    /// Mean score ×100 per "task@length" and overall, mean density and compression ratio.
    nlohmann::json metrics() const;
    double score() const;  ///< overall mean ×100
};

/// Maps the short names niah_single, niah_multikey, variable_tracking to niah_single_1, niah_multikey_1, vt.
std::string canonical_task(const std::string& name);

/// Generates the examples and runs them. Throws Error before any work for an unknown task, a length beyond
/// the model's context (input, decode preamble and answer), a decode preamble < 0 or with query_aware, or a missing
/// corpus for tasks that need one.
RulerResult run_ruler(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus,
                      const std::string& policy_spec, const RulerOptions& o);

/// Writes predictions.csv, metrics.json and config.yaml of one result into dir (created).
void write_ruler_cell(const std::string& dir, const RulerResult& r, const RulerOptions& o, const std::string& model_path,
                      const std::string& corpus_path);

}  // namespace kvsieve
