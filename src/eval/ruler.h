#pragma once
// Running RULER-style tasks (eval/tasks.h) under a KV cache policy: greedy generation, string-match scores,
// density and compression ratio per sample.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/ruler_prompt.h"

namespace kvsieve {

class LlamaModel;
class Tokenizer;

struct RulerOptions {
    std::vector<std::string> tasks{"niah_single_1"};
    std::vector<int64_t> lengths{1024};
    int64_t samples = 10;         ///< examples per (task, length)
    uint64_t seed = 0;            ///< example i of a (task, length) uses seed + i; held-out data uses other seeds
    std::string kv_type = "f16";  ///< KV element types, parse_kv_types spec: "f16", "q8_0", or keys/values "q8_0/f16"
    std::string kv_rotate =
        "auto";                 ///< rotation of the stored entries: auto, on, off (cache/kv_rotation.h KVRotateMode)
    int64_t prefill_chunk = 0;  ///< 0: one batch (as session/prefill_plan.h plans it)
    /// Judge and compress after every prefill chunk (KVCache::set_compress_during_prefill: the memory-bounded
    /// prefill, as the server's --compress-during-prefill) instead of once at the context's end. Recorded in the
    /// cell only when set.
    bool compress_during_prefill = false;
    /// false (default, kvpress and the KVzap paper's protocol): the context is prefilled and compressed, then the
    /// question is fed uncompressed and the answer generated; true: context and question are one prompt, compressed
    /// after the question was seen (query-aware).
    bool query_aware = false;
    /// Decode-time variant (query-agnostic only): after the context, the model generates this many tokens of its
    /// own (greedy, never an end-of-generation token) as decode steps — so a policy that evicts at decode time
    /// (a fixed budget) must keep the needle through a long generation — and only then gets the question. 0: none.
    int64_t decode_preamble = 0;
    /// How examples become token ids (eval/ruler_prompt.h): raw text (default) or kvpress's chat format with
    /// `chat_template` (the model's: chat_template_for_model).
    RulerFormat format = RulerFormat::kRaw;
    ChatTemplate chat_template;
    bool progress = true;
    /// Runs only the examples e with e mod shards = shard (0 ≤ shard < shards), so that several processes share a
    /// run's examples (eval sweep --shard K/N); each keeps its samples in a partial file of its own.
    int shard = 0, shards = 1;
};

struct RulerSample {
    std::string task;
    int64_t length = 0, index = 0;
    double score = 0;  ///< in [0, 1]
    double density = 1, compression_ratio = 0;
    /// KV bytes at the end of the example (pages in use, at the stored row sizes: KVStats::kv_bytes_final) per
    /// position processed, and as a fraction of a full F16 cache of the same positions (KVStats::kv_bytes_full).
    /// Absent in samples written before they were recorded.
    std::optional<double> kv_bytes_per_token, kv_bytes_vs_full_f16;
    std::string prediction;
    std::vector<std::string> answers;

    nlohmann::json to_json() const;
    /// Throws Error naming the key for a missing or mistyped field.
    static RulerSample from_json(const nlohmann::json& j);
};

struct RulerResult {
    std::string policy;
    bool query_aware = false;
    int64_t decode_preamble = 0;
    RulerFormat format = RulerFormat::kRaw;
    std::vector<RulerSample> samples;
    /// Mean score ×100 per "task@length" and overall, mean density and compression ratio, and the protocol
    /// (policy, query_aware, decode_preamble, format: "raw" or "chat"); when every sample has them, the means of
    /// kv_bytes_per_token (bytes) and kv_bytes_vs_full_f16 (a fraction; its inverse is "× smaller than full F16").
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

/// Called with each new sample of a cell (its index in the specs) as soon as it is scored.
using RulerSampleFn = std::function<void(size_t cell, const RulerSample& sample)>;

/// Runs several policies over the same examples together, each giving the result run_ruler gives for it alone (for a
/// model with F32 weights, up to the float rounding of a question shorter than kGemmMinTokens, which the batched step
/// takes through the row-exact GEMV: LlamaModel::forward_batch): per
/// example, the context is prefilled once for every policy whose prefill is dense (session/shared_prefill.h: the
/// weight products once, attention and scoring per cache; the others and a chunked prefill run alone), then the
/// decode preamble, the question and the answers of every policy go through batched steps
/// (LlamaModel::forward_batch, one read of the weights for all of them). `done` is empty or has one result per spec
/// with the samples a cell already has (any examples, index = example number in generation order, e.g. from the
/// partial files, read_ruler_partial; an example given twice counts once, the first); an example runs only for the
/// cells that lack it, and only if it is one of o.shard's (e mod o.shards = o.shard). Each result's samples are
/// returned sorted by index: all examples when shards = 1, else those given and this shard's. Throws Error as
/// run_ruler does, before any work, for `done` of another size, a sample whose index, task or length is not the
/// run's example, or a shard outside 0 … shards − 1.
std::vector<RulerResult> run_ruler_cells(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus,
                                         const std::vector<std::string>& specs, const RulerOptions& o,
                                         std::vector<RulerResult> done = {}, const RulerSampleFn& on_sample = {});

/// Writes every example of a run (the ones run_ruler makes for o, in the same order) to a JSON Lines file, one
/// object per line: index, task, length, seed, context, question (without its answer prefix), answer_prefix,
/// answers, max_new_tokens, format, and context_ids / question_ids, the prompt ids in o.format. The text fields are
/// what kvpress's RULER data calls context, question and answer_prefix. Throws Error as run_ruler does before any
/// work, or if the file cannot be written.
void export_ruler_examples(const std::string& path, const LlamaModel& model, const Tokenizer& tok,
                           const std::string& corpus, const RulerOptions& o);

/// The settings a cell's samples depend on (policy, model, corpus, protocol, prompt format, tasks, lengths, samples,
/// seed, KV type, prefill chunk), as recorded in its partial file.
nlohmann::json ruler_cell_settings(const std::string& spec, const RulerOptions& o, const std::string& model_path,
                                   const std::string& corpus_path);
/// The partial file of a shard: partial.jsonl for an unsharded run (shards = 1), partial.shard<K>of<N>.jsonl for
/// shard K of N. Throws Error for a shard outside 0 … shards − 1.
std::string ruler_partial_name(int shard, int shards);
/// A cell's samples so far, from every partial file in dir (partial.jsonl and each shard's, in name order; each has
/// the settings on its first line and one sample per line after; a last line cut short by an interrupted write, one
/// without its newline included, is dropped, from the file too), sorted by example index, an example found in two
/// files once (from the first); none if there is no such file. Throws Error naming
/// the file and key when a file's settings differ from `settings` (a file without "format" was made raw, before
/// the format was recorded), or for a damaged line before the last.
std::vector<RulerSample> read_ruler_partial(const std::string& dir, const nlohmann::json& settings);
/// Appends one sample to dir's partial file of the shard (ruler_partial_name; created with `settings` as its first
/// line), flushed at once; bytes of the prediction that are not UTF-8 (an answer cut off inside a character) are
/// written as U+FFFD.
void append_ruler_partial(const std::string& dir, const nlohmann::json& settings, const RulerSample& s, int shard = 0,
                          int shards = 1);
/// Removes every partial file of dir (once the cell's metrics are written).
void remove_ruler_partials(const std::string& dir);

/// Writes predictions.csv, metrics.json and config.yaml of one result into dir (created); both record the prompt
/// format ("format: chat" / "raw").
void write_ruler_cell(const std::string& dir, const RulerResult& r, const RulerOptions& o,
                      const std::string& model_path, const std::string& corpus_path);

}  // namespace kvsieve
