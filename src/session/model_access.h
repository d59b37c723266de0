#pragma once
// The session's side of a policy's after-prefill step (policy/after_prefill.h): a model, its tokenizer and one
// sequence's cache, offered to the policy as ModelAccess.
#include <cstdint>
#include <vector>

#include "policy/after_prefill.h"

namespace kvsieve {

class KVCache;
class LlamaModel;
class Tokenizer;

/// ModelAccess over `model`, `tok` and `cache` (which holds the context). Replayed tokens attend through the real
/// cache, so the hidden states are the model's true ones; they are rolled back after each replay.
class SessionModelAccess : public ModelAccess {
public:
    SessionModelAccess(const LlamaModel& model, const Tokenizer& tok, KVCache& cache)
        : model_(model), tok_(tok), cache_(cache) {}
    const ModelConfig& config() const override;
    std::vector<int32_t> encode(const std::string& text) const override;
    int64_t n_tokens() const override;
    int64_t n_ctx() const override;
    void replay(const std::vector<int32_t>& ids, const std::function<bool(int32_t)>& wanted,
                const std::function<void(const StepEvent&)>& observe) override;
    std::vector<float> output_projection(int layer) const override;

private:
    const LlamaModel& model_;
    const Tokenizer& tok_;
    KVCache& cache_;
};

/// Runs the cache's policy's after-prefill step (if any) with a SessionModelAccess and writes the scores it
/// returns into every cached entry.
void run_after_prefill(const LlamaModel& model, const Tokenizer& tok, KVCache& cache,
                       const std::vector<int32_t>& context);
/// The scores the cache's policy's after-prefill step gives (the policy must have one), without writing them;
/// `also` as AfterPrefill's (other steps' scores to give from the same pass where the step can).
EntryScores after_prefill_scores(const LlamaModel& model, const Tokenizer& tok, KVCache& cache,
                                 const std::vector<int32_t>& context, OtherEntryScores* also = nullptr);

}  // namespace kvsieve
