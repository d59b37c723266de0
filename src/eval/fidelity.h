#pragma once
// Decode-heavy fidelity: how closely a compressed cache follows the full cache through a long generation (the
// setting of KVpop's evaluation, §4: long reasoning traces, scored relative to the dense teacher as in its Table 1).
// For each prompt (a window of a corpus), the teacher is the same model with a full cache generating `gen` tokens,
// greedily or sampled at a temperature (a small model's greedy continuation soon repeats itself, which every cache
// reproduces; sampling keeps the text moving). Each policy then reads the prompt and is fed the teacher's tokens one
// decode step at a time (teacher forcing), and at every step its next-token distribution is compared with the
// teacher's:
//   greedy prefix   steps until its most likely token first differs from the teacher's most likely token — for a
//                   greedy teacher its context equals its own free-running one up to that point, so this is the
//                   length of the free-running greedy continuation that agrees with the teacher;
//   token accuracy  fraction of steps whose most likely token is the teacher's most likely token;
//   KL              KL(teacher ‖ policy) in nats per step over the teacher's `top` most likely tokens and one bucket
//                   for the rest (a lower bound of the full KL, by the data-processing inequality; the teacher's
//                   distribution is kept in this form so it is computed once per prompt);
// and its cache's bytes along the generation (memory vs generation length, KVpop Fig. 4).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvsieve {

class LlamaModel;
class Tokenizer;

struct FidelityOptions {
    int64_t prompt_tokens = 512;  ///< prompt length, BOS included, taken from the corpus
    int64_t gen_tokens = 1024;    ///< teacher's greedy continuation
    int64_t samples = 2;          ///< prompts (consecutive windows of the corpus)
    int64_t top = 256;            ///< teacher probabilities kept per step for the KL
    int64_t prefill_chunk =
        0;  ///< chunked prefill of the prompt, compression after each chunk (0: one batch; session/prefill_plan.h)
    int64_t memory_every = 64;    ///< steps between KV-byte records
    double temp = 0;              ///< teacher's sampling temperature (0: greedy)
    uint64_t seed = 1;            ///< its sampling seed (prompt i uses seed + i)
    std::string kv_type = "f16";  ///< KV element types, parse_kv_types spec: "f16", "q8_0", or keys/values "q8_0/f16"
    std::string kv_rotate =
        "auto";          ///< rotation of the stored entries: auto, on, off (cache/kv_rotation.h KVRotateMode)
    std::string corpus;  ///< the corpus's name (its path), recorded in the report and checked on resume
    bool progress = true;
};

/// The full-cache teacher of one prompt.
struct FidelityTeacher {
    std::vector<int32_t> prompt;  ///< BOS + prompt tokens
    std::vector<int32_t> tokens;  ///< its continuation (greedy or sampled)
    std::vector<int32_t> best;    ///< its most likely token at each step (= tokens when greedy)
    /// Per step: the `top` most likely tokens with their probabilities, and the probability of all others.
    std::vector<std::vector<std::pair<int32_t, float>>> top;
    std::vector<float> rest;
};

/// One policy's results.
struct FidelityResult {
    std::string policy;
    std::vector<double> prefix, accuracy, kl;  ///< per prompt
    /// Token accuracy in consecutive bins of `memory_every` steps, averaged over the prompts.
    std::vector<double> accuracy_by_step;
    /// (tokens in the sequence, KV bytes) along the generation of the first prompt.
    std::vector<std::pair<int64_t, uint64_t>> memory;
    double mean_prefix = 0, mean_accuracy = 0, mean_kl = 0;
    double compression = 0;  ///< compression ratio at the end of the generation (mean over prompts)
    uint64_t kv_bytes_final = 0, kv_bytes_peak = 0, kv_bytes_full = 0;  ///< first prompt, at its end
    uint64_t state_bytes = 0;  ///< the scorer's per-sequence state, first prompt, at its end
    double decode_tok_s = 0;   ///< decode steps per second (all prompts)
    nlohmann::json to_json() const;
    /// Reads back what to_json wrote. Throws Error naming the first missing or mistyped key.
    static FidelityResult from_json(const nlohmann::json& j);
};

/// The teachers: full cache, greedy. Throws Error for a corpus shorter than the prompts, or prompt + generation
/// beyond the model's context.
std::vector<FidelityTeacher> fidelity_teachers(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus,
                                               const FidelityOptions& o);

/// One policy against the teachers. Throws Error for a bad policy spec.
FidelityResult evaluate_fidelity(const LlamaModel& model, const Tokenizer& tok,
                                 const std::vector<FidelityTeacher>& teachers, const std::string& policy_spec,
                                 const FidelityOptions& o);

/// The results already in DIR/fidelity.json, so that an interrupted or extended run computes only the policies it
/// lacks: empty when there is no such file. Throws Error when the file cannot be read, or when it was made with
/// other settings than `o` and `model_name` (model, corpus, prompt, generation, prompts, top, prefill chunk,
/// temperature, seed or KV type; the first that differs is named), so one table never mixes two protocols.
std::vector<FidelityResult> read_fidelity_results(const std::string& dir, const std::string& model_name,
                                                  const FidelityOptions& o);

/// Writes DIR/fidelity.json, DIR/fidelity.md (a table) and the plots DIR/fidelity_memory.png (KV bytes vs generated
/// tokens) and DIR/fidelity_accuracy.png (token accuracy along the generation). Throws Error on I/O failure.
void write_fidelity_report(const std::string& dir, const std::string& model_name, const FidelityOptions& o,
                           const std::vector<FidelityResult>& results);

}  // namespace kvsieve
