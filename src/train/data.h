#pragma once
// Training data: natural text tokenized and cut into windows, synthetic long-context examples (the RULER-style
// generators of eval/tasks.h, so training and evaluation share one definition of each task), and batches that
// mix both. Every batch is a pure function of (seed, step), so a resumed run sees the data it would have seen.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvsieve {
class Tokenizer;
}

namespace kvsieve::train {

/// One training sequence: tokens[0..n) and per-position loss weights; weight[i] scales the loss of predicting
/// tokens[i] from tokens[0..i) (weight[0] is unused).
struct Sequence {
    std::vector<int32_t> tokens;
    std::vector<float> weight;
};

/// A batch padded to one length: tokens [B, T] (row-major), weights [B, T] (0 on padding).
struct Batch {
    int64_t B = 0, T = 0;
    std::vector<int64_t> tokens;
    std::vector<float> weight;
    int64_t n_synthetic = 0;  ///< rows holding a synthetic example
};

/// A token stream made of documents (one per corpus file, BOS-separated), with a held-out tail of each file.
class TextStream {
public:
    /// Tokenizes `files` (bytes, not paths) under `tok`; the last `holdout_fraction` of each file's bytes (from
    /// a line start) is kept apart for evaluation. Throws Error if a file is empty or the stream is shorter than 2 tokens.
    TextStream(const std::vector<std::string>& files, const Tokenizer& tok, double holdout_fraction);
    /// A window of n tokens starting with BOS at a position drawn from `rng_state` (train part).
    Sequence window(int64_t n, uint64_t& rng_state) const;
    /// Held-out windows of n tokens (BOS and n − 1 text tokens) taken in order from the held-out part of file
    /// i (at most `count`; fewer when the part is short).
    std::vector<Sequence> heldout_windows(size_t i, int64_t n, int64_t count) const;
    size_t files() const { return heldout_.size(); }
    int64_t train_tokens() const { return static_cast<int64_t>(train_.size()); }
    /// The held-out text of file i.
    const std::string& heldout_text(size_t i) const { return heldout_text_.at(i); }

private:
    std::vector<int32_t> train_;
    std::vector<std::vector<int32_t>> heldout_;  // per file, no BOS
    std::vector<std::string> heldout_text_;
    int32_t bos_;
};

/// A synthetic task example as a training sequence: BOS, the task's prompt, then " " + answers joined by ", "
/// + "." and EOS. Answer tokens (and EOS) get weight `answer_weight`, prompt tokens `prompt_weight`. The prompt
/// has at most `length` tokens. Throws Error for an unknown task or a too-short length.
Sequence synthetic_sequence(const std::string& task, int64_t length, const Tokenizer& tok, const std::string& haystack,
                            uint64_t seed, float prompt_weight, float answer_weight, int64_t* answer_begin = nullptr);

/// The training-only task "repeat": a BOS-led text window of n tokens, the KVzip reconstruction instruction
/// ("\n\nRepeat the previous context exactly.\n", Kim et al. 2025 §3.1) and the same n tokens again, then EOS.
/// The repeated part (and EOS) gets `answer_weight`: a dense copying signal that teaches induction (the circuit
/// retrieval tasks need) far sooner than needles alone, and makes the model able to reconstruct its context.
Sequence repeat_sequence(const TextStream& text, const Tokenizer& tok, int64_t length, uint64_t& rng_state,
                         float prompt_weight, float answer_weight);

/// Name of the training-only task of repeat_sequence().
inline constexpr const char* kRepeatTask = "repeat";

/// The training-only task "copy": the repeat task on uniformly random normal tokens instead of text (BOS,
/// n random tokens, the reconstruction instruction, the same n tokens, EOS). Nothing but copying predicts the
/// second half, so the whole gradient of its loss pushes toward the induction circuit (the synthetic data on
/// which Olsson et al. 2022, "In-context Learning and Induction Heads", measure it). n is drawn in
/// [room/2, room], room = (length − 2 − instruction) / 2. Throws Error if length leaves fewer than 8 tokens.
Sequence copy_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state, float prompt_weight,
                       float answer_weight, int64_t* answer_begin = nullptr);

/// Name of the training-only task of copy_sequence().
inline constexpr const char* kCopyTask = "copy";

/// The training-only task "copy_codes": the copy task on random codes instead of random tokens — 7-digit
/// numbers and 5-letter capital names (the value and variable formats of eval/tasks.h's NIAH and variable
/// tracking), space-separated, cut to n tokens. Digits and capitals are single tokens drawn from alphabets of
/// 10 and 26, so the token just copied occurs many times in the body: copying must match the last few
/// tokens, not one (the skill multi-key NIAH and variable tracking need when several numbers or names share
/// the context). Layout, weights and n as copy_sequence(); throws Error if length leaves fewer than 8 tokens.
Sequence copy_codes_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state, float prompt_weight,
                             float answer_weight, int64_t* answer_begin = nullptr);

/// Name of the training-only task of copy_codes_sequence().
inline constexpr const char* kCopyCodesTask = "copy_codes";

/// The training-only task "recall": multi-query associative recall (MQAR; Arora et al. 2023, "Zoology", §3)
/// in the NIAH needle format. BOS, a header, m needles "One of the special magic numbers for K is: V." (K a
/// two-word key of eval/tasks.h, V a 7-digit number, keys distinct), "\nRecall them.\n", then the m keys in
/// another random order, each "The special magic number for K is: V.\n". Only the value tokens of the recall
/// lines (and their full stops) weigh `answer_weight`; everything else `prompt_weight` — the recall keys' order
/// is random, so they are not predictable. Every recalled value needs the key match that multi-key NIAH needs
/// once per example. m is the largest count that fits in `length` tokens (EOS included). *answer_begin
/// (if set) receives the index of the first weighted answer token. Throws Error if not even 2 needles fit.
Sequence recall_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state, float prompt_weight,
                         float answer_weight, int64_t* answer_begin = nullptr);

/// Name of the training-only task of recall_sequence().
inline constexpr const char* kRecallTask = "recall";

/// The training-only task "links": the recall layout of recall_sequence() on variable links. m links
/// "VAR X = VAR Y." (X, Y 5-capital names as in variable tracking, all distinct), "\nRecall them.\n", then in
/// another random order "The variable assigned VAR Y is: X.\n"; only X and its full stop weigh `answer_weight`.
/// The answer comes *before* its key in the link, so an induction head that finds Y copies what follows Y, not
/// X: the lookup variable tracking needs at every hop (eval/tasks.h vt_2), one per link. Throws Error if not
/// even 2 links fit.
Sequence links_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state, float prompt_weight,
                        float answer_weight, int64_t* answer_begin = nullptr);

/// Name of the training-only task of links_sequence().
inline constexpr const char* kLinksTask = "links";

/// The training-only task "links_words": links_sequence() with one-token names (the vocabulary's words of ≥ 3
/// lower-case letters that encode as one token after "VAR "; e.g. "VAR river = VAR house."). Every link then has
/// the same layout in tokens, so the lookup is a fixed-offset copy: the short form of the links lookup, to learn
/// first. Throws Error if the vocabulary has fewer than 8 such words or not even 2 links fit.
Sequence links_words_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state, float prompt_weight,
                              float answer_weight, int64_t* answer_begin = nullptr);

/// Name of the training-only task of links_words_sequence().
inline constexpr const char* kLinksWordsTask = "links_words";

/// The training-only task "chains": variable tracking (eval/tasks.h vt) without a haystack and with as many
/// chains as fit. One hop count h ∈ {1..4} for the row (uniform, lowered while two chains do not fit); chains of
/// h + 1 statements ("VAR A = 1234567." then "VAR B = VAR A." …), each at sorted uniform depths, interleaved by
/// depth; then one vt question per chain, in random order, each followed by its answer " A, B, ….". The chain
/// count is the largest in [2, 16] whose row (EOS included) fits `length` tokens. Answer tokens weigh
/// `answer_weight`, the rest `prompt_weight`.
/// With many short chains, listing variables in order of appearance fails: every hop needs the lookup of the
/// name written *before* the previous answer, as in vt_2. *answer_begin (if set) receives the index of the first
/// answer token. Throws Error if two chains do not fit.
Sequence chains_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state, float prompt_weight,
                         float answer_weight, int64_t* answer_begin = nullptr);

/// Name of the training-only task of chains_sequence().
inline constexpr const char* kChainsTask = "chains";

/// Name of the training-only task of palindrome_sequence() (train/palindrome.h).
inline constexpr const char* kPalindromeTask = "palindrome";

/// Name of the training-only task of palindrome_tokens_sequence(): the same rows, one token per number.
inline constexpr const char* kPalindromeTokensTask = "palindrome_tokens";

/// Name of the training-only task of palindrome_tokens_mixed_sequence(): one token per number, 2 … 32 numbers.
inline constexpr const char* kPalindromeTokensMixedTask = "palindrome_tokens_mixed";

/// True for the recall-style training tasks (recall, links, links_words, chains and the palindrome forms): rows whose
/// weighted tokens are answers, made by recall_style_maker().
inline bool is_recall_style_task(const std::string& name) {
    return name == kRecallTask || name == kLinksTask || name == kLinksWordsTask || name == kChainsTask ||
           name == kPalindromeTask || name == kPalindromeTokensTask || name == kPalindromeTokensMixedTask;
}

/// The row maker of a recall-style task (same arguments as recall_sequence()); throws Error for any other name.
using RecallStyleMaker = Sequence (*)(const Tokenizer&, int64_t, uint64_t&, float, float, int64_t*);
RecallStyleMaker recall_style_maker(const std::string& task);

/// True for the training-only tasks (repeat, copy, copy_codes and the recall-style ones), which eval/tasks.h
/// does not generate.
inline bool is_training_only_task(const std::string& name) {
    return name == kRepeatTask || name == kCopyTask || name == kCopyCodesTask || is_recall_style_task(name);
}

/// True for the copy tasks (copy, copy_codes), whose pretraining evaluation is the token accuracy of the copy.
inline bool is_copy_task(const std::string& name) { return name == kCopyTask || name == kCopyCodesTask; }

/// A row of the copy task `task` (copy_sequence() or copy_codes_sequence()); throws Error for any other name.
Sequence copy_task_sequence(const std::string& task, const Tokenizer& tok, int64_t length, uint64_t& rng_state,
                            float prompt_weight, float answer_weight, int64_t* answer_begin = nullptr);

/// The mixture one run trains on.
struct MixSpec {
    double synthetic_fraction = 0.5;      ///< probability that a row is a synthetic example
    std::map<std::string, double> tasks;  ///< task → relative weight
    std::vector<int64_t> lengths;         ///< sequence lengths (tokens), one per batch
    std::vector<double> length_weights;   ///< relative weights of lengths (empty: uniform)
    int64_t tokens_per_batch = 16384;     ///< B = max(1, tokens_per_batch / T)
    float prompt_weight = 1.0f, answer_weight = 1.0f;
};

/// Whether `task` has rows in batches of T tokens: make_batch() replaces the rows of a recall-style or eval task
/// that does not fit by text rows (eval tasks: judged at the longest prompt it draws, T minus an answer margin),
/// and a repeat or copy row that does not fit throws Error.
bool task_fits_length(const std::string& task, int64_t T, const Tokenizer& tok, const std::string& haystack);

/// Builds batch number `step` of a run: its length, rows and contents are drawn from a generator seeded by
/// (seed, step) alone.
Batch make_batch(const MixSpec& mix, const TextStream& text, const Tokenizer& tok, const std::string& haystack,
                 uint64_t seed, int64_t step);

/// Mixes two 64-bit values into a well-spread seed (splitmix64 finaliser).
uint64_t mix_seed(uint64_t a, uint64_t b);
/// Next value of a splitmix64 stream.
uint64_t next_random(uint64_t& state);

}  // namespace kvsieve::train
