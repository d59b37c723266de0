#include "session/model_access.h"

#include "attend/paged_attention.h"
#include "cache/kv_cache.h"
#include "kernels/matmul.h"
#include "model/llama_model.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {

namespace {

/// Wraps the real cache during a replay: each layer's inputs, with the wanted cached entries gathered per KV head
/// and the new tokens' keys and values after them, go to the observer; then attention runs on the real cache.
class ObservingCache : public SequenceCache {
public:
    ObservingCache(KVCache& real, int n_layer, const std::function<bool(int32_t)>& wanted,
                   const std::function<void(const StepEvent&)>& observe)
        : real_(real), attention_(real), n_layer_(n_layer), wanted_(wanted), observe_(observe) {}

    int64_t n_tokens() const override { return real_.n_tokens(); }
    int64_t n_ctx() const override { return real_.n_ctx(); }
    void finish_step(int64_t pos0, int64_t T, StepPhase phase) override { real_.finish_step(pos0, T, phase); }

    void attend(const LayerInputs& in, float* out) override {
        const int d = in.head_dim, Hkv = in.n_head_kv;
        const int64_t T = in.T, kvd = static_cast<int64_t>(Hkv) * d;
        std::vector<std::vector<float>> K(Hkv), V(Hkv);
        std::vector<std::vector<int32_t>> P(Hkv);
#pragma omp parallel for schedule(dynamic)
        for (int h = 0; h < Hkv; ++h) {
            const HeadCache& hc = real_.head(in.layer, h);
            std::vector<float> k(d), v(d);
            for (Region r : kRegionsInOrder)
                for (int64_t i = 0; i < hc.region(r)->size(); ++i) {
                    const int32_t p = hc.region(r)->positions()[i];
                    if (!wanted_(p)) continue;
                    hc.region(r)->read(i, k.data(), v.data());
                    P[h].push_back(p);
                    K[h].insert(K[h].end(), k.begin(), k.end());
                    V[h].insert(V[h].end(), v.begin(), v.end());
                }
            for (int64_t t = 0; t < T; ++t) {
                K[h].insert(K[h].end(), in.k + t * kvd + h * d, in.k + t * kvd + (h + 1) * d);
                V[h].insert(V[h].end(), in.v + t * kvd + h * d, in.v + t * kvd + (h + 1) * d);
                P[h].push_back(static_cast<int32_t>(in.pos0 + t));
            }
        }
        StepEvent si(in, n_layer_, nullptr);
        for (int h = 0; h < Hkv; ++h)
            si.heads.push_back(
                {static_cast<int64_t>(P[h].size()), K[h].data(), V[h].data(), P[h].data(), nullptr, nullptr});
        observe_(si);
        attention_.attend(in, out);
    }

private:
    KVCache& real_;
    PagedAttention attention_;  // attention over real_
    int n_layer_;
    const std::function<bool(int32_t)>& wanted_;
    const std::function<void(const StepEvent&)>& observe_;
};

}  // namespace

const ModelConfig& SessionModelAccess::config() const { return model_.config(); }
std::vector<int32_t> SessionModelAccess::encode(const std::string& text) const {
    return tok_.encode(text, false, false);
}
int64_t SessionModelAccess::n_tokens() const { return cache_.n_tokens(); }
int64_t SessionModelAccess::n_ctx() const { return cache_.n_ctx(); }

void SessionModelAccess::replay(const std::vector<int32_t>& ids, const std::function<bool(int32_t)>& wanted,
                                const std::function<void(const StepEvent&)>& observe) {
    const int64_t n = cache_.n_tokens();
    require(n + static_cast<int64_t>(ids.size()) <= cache_.n_ctx(), "a replay of ", ids.size(), " tokens after ", n,
            " needs more positions than the context holds (", cache_.n_ctx(), ")");
    ObservingCache oc(cache_, model_.config().n_layer, wanted, observe);
    std::vector<float> logits;
    model_.forward(StepPhase::kPrefill, ids, oc, logits);
    cache_.rollback(n);
}

std::vector<float> SessionModelAccess::output_projection(int layer) const {
    const WeightMatrix& W = model_.weights().layers.at(layer).wo;
    std::vector<float> wo(static_cast<size_t>(W.rows) * W.cols);
    for (int64_t r = 0; r < W.rows; ++r) dequantize_weight_row(W, r, wo.data() + r * W.cols);
    return wo;
}

EntryScores after_prefill_scores(const LlamaModel& model, const Tokenizer& tok, KVCache& cache,
                                 const std::vector<int32_t>& context, OtherEntryScores* also) {
    require(static_cast<bool>(cache.policy().after_prefill), "policy ", cache.policy().spec,
            " has no after-prefill step");
    SessionModelAccess access(model, tok, cache);
    return cache.policy().after_prefill(access, context, also);
}

void run_after_prefill(const LlamaModel& model, const Tokenizer& tok, KVCache& cache,
                       const std::vector<int32_t>& context) {
    if (!cache.policy().after_prefill) return;
    cache.set_scores(after_prefill_scores(model, tok, cache, context));
}

}  // namespace kvsieve
