#include "session/session.h"

#include <algorithm>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "util/error.h"

namespace kvsieve {

Session::Session(const LlamaModel& model, const Tokenizer& tok, KVCache& cache)
    : model_(model), tok_(tok), cache_(cache), attention_(cache) {
    require(cache.n_tokens() == 0, "a session starts from an empty cache (it holds ", cache.n_tokens(), " tokens)");
    tokens_.reserve(static_cast<size_t>(cache.n_ctx()));  // a decode step appends without reallocating
}

int64_t Session::n_tokens() const { return cache_.n_tokens(); }
int64_t Session::n_ctx() const { return cache_.n_ctx(); }

void Session::prefill(const std::vector<int32_t>& prompt, const PrefillPlan& plan, std::vector<float>& logits,
                      const ChunkFn& on_chunk) {
    require(n_tokens() + static_cast<int64_t>(prompt.size()) <= n_ctx(), "the prompt needs ",
            n_tokens() + prompt.size(), " positions but the context holds ", n_ctx());
    tokens_.insert(tokens_.end(), prompt.begin(), prompt.end());
    try {
        kvsieve::prefill(model_, tok_, cache_, prompt, tokens_, plan, logits, on_chunk);
    } catch (...) {
        tokens_.resize(static_cast<size_t>(cache_.n_tokens()));  // what the cache really holds
        throw;
    }
}

void Session::decode(int32_t token, std::vector<float>& logits) {
    require(n_tokens() < n_ctx(), "the context of ", n_ctx(), " positions is full");
    cache_.hold_admission(false);
    step_token_.assign(1, token);
    model_.forward(StepPhase::kDecode, step_token_, attention_, logits);
    tokens_.push_back(token);
}

LlamaModel::Segment Session::begin_step(const std::vector<int32_t>& ids, StepKind kind, std::vector<float>& logits,
                                        bool all_logits) {
    require(!ids.empty(), "a step needs at least one token");
    require(kind != StepKind::kDecode || ids.size() == 1, "a decode step is one token, got ", ids.size());
    require(n_tokens() + static_cast<int64_t>(ids.size()) <= n_ctx(), "the sequence needs ", n_tokens() + ids.size(),
            " positions but the context holds ", n_ctx());
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    cache_.hold_admission(kind == StepKind::kPrefillChunk);  // judged at the prompt's end (KVCache::end_prefill)
    return {&ids, phase_of(kind), &attention_, &logits, all_logits};
}

void Session::end_step(StepKind kind) {
    if (kind == StepKind::kPrefillChunk) cache_.end_prefill_chunk();
    if (kind == StepKind::kPrefillLast) finish_prefill(model_, tok_, cache_, tokens_);
}

void Session::abort_step() {
    tokens_.resize(static_cast<size_t>(std::min<int64_t>(cache_.n_tokens(), static_cast<int64_t>(tokens_.size()))));
}

void Session::restore_tokens(const std::vector<int32_t>& tokens) {
    require(cache_.n_tokens() == static_cast<int64_t>(tokens.size()), "a history of ", tokens.size(),
            " tokens does not match a cache of ", cache_.n_tokens(), " positions");
    tokens_ = tokens;
}

void Session::rollback(int64_t n) {
    require(n >= 0 && n <= n_tokens(), "cannot roll a sequence of ", n_tokens(), " tokens back to ", n);
    require(cache_.scorer_state() == nullptr, "the policy '", cache_.policy().spec,
            "' keeps a per-sequence scorer state, which cannot be rolled back");
    cache_.rollback(n);
    tokens_.resize(static_cast<size_t>(n));
}

void Session::reset() {
    cache_.clear();
    tokens_.clear();
}

}  // namespace kvsieve
