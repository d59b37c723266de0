#pragma once
// RULER-style synthetic long-context tasks (Hsieh et al. 2024, "RULER: What's the Real Context Size of Your
// Long-Context Language Models?", §3 and App. B), generated locally and deterministically from a seed, with
// lengths counted in the model's own tokens. Shared by evaluation and by training data generation.
#include <cstdint>
#include <string>
#include <vector>

namespace kvsieve {

class Tokenizer;

/// One example: the prompt (haystack, needles, question and answer prefix) and the reference answers.
struct TaskExample {
    std::string task;
    std::string input;     ///< prompt text, ending with the answer prefix: context() + question
    std::string question;  ///< the input's tail after the context: the question and the answer prefix
    /// The question's tail that starts the model's answer (RULER's answer_prefix, e.g. " Answer: The top 10 words
    /// that appear most often in the list are:"): from the last " Answer:" of the question, else from the space
    /// after its last "?" (the NIAH tasks' " The special magic … are"); kvpress's chat format puts the end of the
    /// user turn and the assistant's opening between the rest of the question and this.
    std::string answer_prefix;
    std::vector<std::string> answers;  ///< every string expected in the completion
    int64_t input_tokens = 0;          ///< tokens of input (BOS excluded)
    int64_t max_new_tokens = 0;        ///< tokens to generate
    /// The input without the question (the document a query-agnostic policy compresses before it sees the question).
    std::string context() const { return input.substr(0, input.size() - question.size()); }
    /// The question without its answer prefix (what kvpress's RULER data calls the question).
    std::string question_only() const { return question.substr(0, question.size() - answer_prefix.size()); }
};

/// Names of the tasks: niah_single_1/2/3, niah_multikey_1/2/3, niah_multivalue, niah_multiquery, vt, vt_2 (two
/// interleaved chains; the question asks for one), cwe, fwe, qa.
const std::vector<std::string>& task_names();

/// The word list the generators draw keys and common/rare words from (77 lower-case English nouns); a NIAH key
/// is two of them joined by '-' ("apple-river").
const std::vector<std::string>& task_words();
/// Throws Error listing the known names unless `name` is one.
void check_task_name(const std::string& name);

/// Builds an example of `task` whose input is at most `length` tokens (and within ~5% of it) under `tok`.
/// `corpus` is prose for the haystacks of niah_single_2/3, the multi-key variants and qa (paragraphs are
/// taken from a seed-dependent offset). Deterministic for (task, length, seed, corpus, tokenizer). Throws
/// Error if the length is too short for the task's template or the corpus is empty where one is needed.
TaskExample make_task_example(const std::string& task, int64_t length, const Tokenizer& tok, const std::string& corpus,
                              uint64_t seed);

/// The two fixed parts of a variable-tracking prompt (RULER App. B): the instruction before the statements
/// ("Memorize and track …\n\n") and the question after them, which starts with "\n", asks for the variables
/// assigned `value` and ends with the answer prefix "… `count` variables are assigned the value `value`, they
/// are:". The eval tasks vt/vt_2 and the training task "chains" share them.
std::string variable_tracking_header();
std::string variable_tracking_question(const std::string& value, int count);

/// RULER's metrics (§3): string_match_all = mean over references of [reference ⊂ prediction] (case-insensitive);
/// string_match_part = 1 if any reference is found. Both in [0, 1].
double string_match_all(const std::string& prediction, const std::vector<std::string>& answers);
double string_match_part(const std::string& prediction, const std::vector<std::string>& answers);
/// The metric RULER uses for a task (part for qa, all otherwise).
double task_score(const std::string& task, const std::string& prediction, const std::vector<std::string>& answers);

}  // namespace kvsieve
