#pragma once
// Choosing the next token from logits: greedy or temperature sampling with top-k, top-p and min-p.
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace kvsieve {

/// Sampling settings with llama.cpp's meaning and defaults. temp ≤ 0 means greedy (argmax, lowest id on ties).
struct SamplerParams {
    float temp = 0.8f;
    int top_k = 40;       ///< keep the k most likely tokens (≤ 0: all)
    float top_p = 0.95f;  ///< keep the smallest set whose probability mass reaches p (1: off)
    float min_p = 0.05f;  ///< drop tokens whose probability is below min_p × the top probability (0: off)
    uint64_t seed = 0xdeadbeef;
    /// (token id, bias) pairs added to the logits before anything else, in logit units (OpenAI's logit_bias:
    /// −100 in effect bans a token, +100 in effect forces it). Applies to greedy decoding too.
    std::vector<std::pair<int32_t, float>> logit_bias;
    /// OpenAI's repetition penalties over the tokens this sampler has drawn (not the prompt): each logit l_j becomes
    /// l_j − c_j·frequency_penalty − [c_j > 0]·presence_penalty, c_j the times token j was drawn (OpenAI API
    /// reference, "Parameter details": frequency and presence penalties). Applied after logit_bias, before
    /// temperature; greedy decoding too. In [−2, 2] for the server; 0: off.
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;

    /// Throws Error naming the first out-of-range value (temp < 0, top_p ∉ (0,1], min_p ∉ [0,1], a negative
    /// logit_bias id or a non-finite bias).
    void validate() const;
};

/// Applies top-k → top-p → min-p to the softmax of logits / temp, then draws from what remains
/// (the order llama.cpp's default chain uses). When nothing is cut (top_k ≤ 0, top_p 1, min_p 0: OpenAI's
/// defaults) it draws from the whole softmax without sorting the vocabulary. Deterministic for a given seed.
class Sampler {
public:
    explicit Sampler(const SamplerParams& p);
    /// logits: [n_vocab] floats. Throws Error if a logit_bias id is not below n_vocab. Counts the drawn token
    /// for the penalties.
    int32_t sample(const float* logits, int n_vocab);
    /// The random generator's state as text (std::mt19937_64's stream form), to continue a saved sequence with
    /// the same draws; set_state throws Error for text that is not such a state.
    std::string state() const;
    void set_state(const std::string& s);

private:
    SamplerParams p_;
    std::mt19937_64 rng_;
    std::vector<std::pair<float, int32_t>> cand_;
    std::vector<double> wts_;
    std::vector<float> biased_;    ///< the logits with logit_bias and the penalties applied (when there are some)
    std::vector<int32_t> counts_;  ///< times each token was drawn (only with a penalty; not part of state())
    int32_t draw(const float* logits, int n_vocab);
};

/// Index of the largest logit (lowest index on ties).
int32_t argmax(const float* logits, int n);

}  // namespace kvsieve
