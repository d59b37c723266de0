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

#include "policy/policy.h"
#include "policy/position_scores.h"
#include "util/error.h"

namespace kvsieve {

namespace {
class StackedState : public ScorerState {
public:
    std::unique_ptr<ScorerState> admit, evict;
    std::vector<PositionScores> pending;  // [L·Hkv]: admission scores of the entries in the window
    std::vector<float> admit_scores;      // [T][Hkv] scratch of on_write, sized by the longest step
    uint64_t bytes() const override {
        uint64_t b = (admit ? admit->bytes() : 0) + (evict ? evict->bytes() : 0);
        for (const auto& p : pending) b += p.size() * (sizeof(int32_t) + sizeof(float));
        return b;
    }
    void save(BinaryWriter& w) const override {
        if (admit) admit->save(w);
        if (evict) evict->save(w);
        w.pod<uint64_t>(pending.size());
        for (const auto& p : pending) p.save(w);
    }
    void load(BinaryReader& r) override {
        if (admit) admit->load(r);
        if (evict) evict->load(r);
        if (r.pod<uint64_t>() != pending.size()) fail(r.what(), " does not hold a stacked state of this model");
        for (auto& p : pending) p.load(r);
    }
};

class StackedScorer : public EntryScorer {
public:
    /// admit, evict: per-entry scorers; tau: the admission threshold; hkv: the model's KV heads (0 until for_model).
    StackedScorer(std::shared_ptr<const EntryScorer> admit, double tau, std::shared_ptr<const EntryScorer> evict,
                  int hkv = 0)
        : admit_(std::move(admit)), evict_(std::move(evict)), tau_(tau), hkv_(hkv) {}
    std::string name() const override { return admit_->name() + ">" + evict_->name(); }
    /// Both scorers for the model, stacked.
    std::shared_ptr<const Scorer> for_model(const ModelConfig& c) const override {
        return std::make_shared<StackedScorer>(entry_for_model(*admit_, c), tau_, entry_for_model(*evict_, c),
                                               c.n_head_kv);
    }
    std::unique_ptr<ScorerState> new_state(const ModelConfig& c) const override {
        auto s = std::make_unique<StackedState>();
        s->admit = admit_->new_state(c);
        s->evict = evict_->new_state(c);
        s->pending.resize(static_cast<size_t>(c.n_layer) * c.n_head_kv);
        return s;
    }
    void on_write(const StepEvent& e, float* scores) const override {
        auto& st = *static_cast<StackedState*>(e.state);
        const int Hkv = e.step.n_head_kv;
        std::vector<float>& a = st.admit_scores;
        if (a.size() < static_cast<size_t>(e.step.T) * Hkv) a.resize(static_cast<size_t>(e.step.T) * Hkv);
        StepEvent ea(e.step, e.n_layer, st.admit.get()), ee(e.step, e.n_layer, st.evict.get());
        admit_->on_write(ea, a.data());
        evict_->on_write(ee, scores);
        for (int64_t t = 0; t < e.step.T; ++t)
            for (int h = 0; h < Hkv; ++h)
                st.pending[static_cast<size_t>(e.step.layer) * Hkv + h].set(static_cast<int32_t>(e.step.pos0 + t),
                                                                            a[t * Hkv + h]);
    }
    float on_window_exit(const WindowExitEvent& e) const override {
        auto& st = *static_cast<StackedState*>(e.state);
        auto& pend = st.pending[static_cast<size_t>(e.layer) * hkv_ + e.head];
        WindowExitEvent ea = e, ee = e;
        ea.state = st.admit.get();
        ee.state = st.evict.get();
        pend.take(e.pos, ea.score);  // its admission score, if the window still holds it
        const float a = admit_->on_window_exit(ea);
        const float r = evict_->on_window_exit(ee);  // always: it may hold a delayed score to release
        return a >= tau_ ? r : -INFINITY;
    }
    float effective_score(float stored, int32_t pos, int64_t now, int layer, int head) const override {
        return evict_->effective_score(stored, pos, now, layer, head);
    }

private:
    /// s.for_model(c), which for a per-entry scorer is one too.
    static std::shared_ptr<const EntryScorer> entry_for_model(const EntryScorer& s, const ModelConfig& c) {
        auto bound = s.for_model(c);
        const EntryScorer* e = bound->entry();
        return std::shared_ptr<const EntryScorer>(std::move(bound), e);
    }

    std::shared_ptr<const EntryScorer> admit_, evict_;
    double tau_;
    int hkv_;
};
}  // namespace

Policy stack_admission(const Policy& admit, const Policy& evict) {
    require(admit.scorer && admit.scorer->entry() && admit.admission.kind == Rule::Kind::kThreshold, "policy '",
            admit.spec, "' cannot stand in front of another: the admission part must be a write-time scorer ",
            "with a threshold (kvzap, spkv, wgkv)");
    require(evict.scorer && evict.scorer->entry() && evict.compression.is_budget() && evict.window > 0, "policy '",
            evict.spec, "' cannot follow an admission: the eviction part must be a write-time scorer with a ",
            "per-head budget and a window (kvpop, kvpop_mlp)");
    require(!admit.selection.active(), "a read-time selection goes after the whole stack");
    Policy p = evict;
    // Aliasing pointers: the per-entry interfaces of the two scorers, owning them.
    p.scorer = std::make_shared<StackedScorer>(std::shared_ptr<const EntryScorer>(admit.scorer, admit.scorer->entry()),
                                               admit.admission.tau,
                                               std::shared_ptr<const EntryScorer>(evict.scorer, evict.scorer->entry()));
    p.admission.kind = Rule::Kind::kThreshold;
    p.admission.tau = -std::numeric_limits<double>::max();  // keeps every finite score: the stacked scorer says −∞
    p.gated_prefill = false;
    return p;
}

}  // namespace kvsieve
