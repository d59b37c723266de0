// Admission in front of eviction: "ADMISSION>EVICTION", e.g. kvzap:model=M,tau=-4>kvpop:model=D,capacity=516. An entry
// leaving the local window is first judged by the admission policy's threshold rule on its own score (KVzap, SP-KV or
// WG-KV: a write-time score, a drop decision made once); only the admitted entries enter the global region, where
// they compete for the eviction policy's per-head capacity B = s + w + k by its scores (KVpop). Admission thins the
// candidates, so the budget k holds entries that passed both; the sinks, window and capacity are the eviction policy's.
// The stacked scorer keeps both scorers' per-sequence states and, for the entries in the window, their admission
// scores until they leave it.
#include <cmath>
#include <limits>
#include <memory>
#include <unordered_map>

#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

namespace {
class StackedState : public ScorerState {
public:
    std::unique_ptr<ScorerState> admit, evict;
    std::vector<std::unordered_map<int32_t, float>> pending;  // [L·Hkv]: admission scores of entries in the window
    uint64_t bytes() const override {
        uint64_t b = (admit ? admit->bytes() : 0) + (evict ? evict->bytes() : 0);
        for (const auto& p : pending) b += p.size() * (sizeof(int32_t) + sizeof(float) + 2 * sizeof(void*));
        return b;
    }
    void save(BinaryWriter& w) const override {
        if (admit) admit->save(w);
        if (evict) evict->save(w);
        w.pod<uint64_t>(pending.size());
        for (const auto& p : pending) save_position_scores(w, p);
    }
    void load(BinaryReader& r) override {
        if (admit) admit->load(r);
        if (evict) evict->load(r);
        if (r.pod<uint64_t>() != pending.size()) fail(r.what(), " does not hold a stacked state of this model");
        for (auto& p : pending) load_position_scores(r, p);
    }
};

class StackedScorer : public Scorer {
public:
    StackedScorer(std::shared_ptr<Scorer> admit, double tau, std::shared_ptr<Scorer> evict)
        : admit_(std::move(admit)), evict_(std::move(evict)), tau_(tau) {}
    std::string name() const override { return admit_->name() + ">" + evict_->name(); }
    void bind(const ModelConfig& c) override {
        admit_->bind(c);
        evict_->bind(c);
        hkv_ = c.n_head_kv;
    }
    std::unique_ptr<ScorerState> new_state(const ModelConfig& c) const override {
        auto s = std::make_unique<StackedState>();
        s->admit = admit_->new_state(c);
        s->evict = evict_->new_state(c);
        s->pending.resize(static_cast<size_t>(c.n_layer) * c.n_head_kv);
        return s;
    }
    bool scores_at_write() const override { return true; }
    void on_write(const WriteEvent& e, ScorerState* state, float* scores) const override {
        auto& st = *static_cast<StackedState*>(state);
        std::vector<float> a(static_cast<size_t>(e.T) * e.n_head_kv);
        admit_->on_write(e, st.admit.get(), a.data());
        evict_->on_write(e, st.evict.get(), scores);
        for (int64_t t = 0; t < e.T; ++t)
            for (int h = 0; h < e.n_head_kv; ++h)
                st.pending[static_cast<size_t>(e.layer) * e.n_head_kv + h][static_cast<int32_t>(e.pos0 + t)] = a[t * e.n_head_kv + h];
    }
    bool reads_at_window_exit() const override { return admit_->reads_at_window_exit() || evict_->reads_at_window_exit(); }
    float on_window_exit(const WindowExitEvent& e, ScorerState* state) const override {
        auto& st = *static_cast<StackedState*>(state);
        auto& pend = st.pending[static_cast<size_t>(e.layer) * hkv_ + e.head];
        WindowExitEvent ea = e;
        auto it = pend.find(e.pos);
        if (it != pend.end()) {
            ea.score = it->second;
            pend.erase(it);
        }
        const float a = admit_->on_window_exit(ea, st.admit.get());
        const float r = evict_->on_window_exit(e, st.evict.get());  // always: it may hold a delayed score to release
        return a >= tau_ ? r : -INFINITY;
    }
    bool decays() const override { return evict_->decays(); }
    float effective_score(float stored, int32_t pos, int64_t now, int layer, int head) const override {
        return evict_->effective_score(stored, pos, now, layer, head);
    }
    void score_prefill(const PrefillScoreInput&, std::vector<std::vector<float>>&) const override {}

private:
    std::shared_ptr<Scorer> admit_, evict_;
    double tau_;
    int hkv_ = 0;
};
}  // namespace

Policy stack_admission(const Policy& admit, const Policy& evict) {
    require(admit.scorer && admit.scorer->scores_at_write() && admit.admission.kind == Rule::Kind::kThreshold,
            "policy '", admit.spec, "' cannot stand in front of another: the admission part must be a write-time scorer ",
            "with a threshold (kvzap, spkv, wgkv)");
    require(evict.scorer && evict.scorer->scores_at_write() && evict.compression.is_budget() && evict.window > 0,
            "policy '", evict.spec, "' cannot follow an admission: the eviction part must be a write-time scorer with a ",
            "per-head budget and a window (kvpop, kvpop_mlp)");
    require(!admit.selection.active(), "a read-time selection goes after the whole stack");
    Policy p = evict;
    p.scorer = std::make_shared<StackedScorer>(admit.scorer, admit.admission.tau, evict.scorer);
    p.admission.kind = Rule::Kind::kThreshold;
    p.admission.tau = -std::numeric_limits<double>::max();  // keeps every finite score: the stacked scorer says −∞
    p.gated_prefill = false;
    return p;
}

}  // namespace kvsieve
