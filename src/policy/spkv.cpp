// spkv: SP-KV's learned utility gates (Szilvasy, Faysse et al., "Self-Pruned Key-Value Attention"; DESIGN §5).
// Each entry's utility u = σ(f_l(h)) ∈ (0, 1) per KV head is predicted from the token's attention-input hidden state
// when it is written (eq. 1; predict/spkv_gates.h, gates stored in the model's own GGUF). The entry stays in the local
// window (w = 128, the paper's default) and is kept beyond it iff u ≥ τ (the paper's hard threshold, eq. 7; τ = 0.5
// by default), in prefill and decode alike. Optional sinks.
// The prefill is gated as the paper's (eqs. 3–5): each query sees its window and the admitted keys only, what a
// decode step would see (sparse_prefill=0: dense prefill, admission afterwards).
//   spkv[:tau=0.5][,window=128][,sinks=0][,sparse_prefill=1][,rule=threshold]
#include <memory>

#include "io/gguf.h"
#include "policy/policy.h"
#include "predict/spkv_gates.h"
#include "util/error.h"

namespace kvsieve {

namespace {
class SpkvScorer : public Scorer {
public:
    std::string name() const override { return "spkv"; }
    void bind(const ModelConfig& c) override {
        require(!c.path.empty(), "policy spkv reads its gates from the model's GGUF, and this model has no file");
        if (gates_ && path_ == c.path) return;  // one load serves every sequence of the model
        GGUFFile f(c.path);
        gates_ = std::make_shared<SpkvGates>(SpkvGates::load(f, c.n_layer, c.n_embd, c.n_head_kv));
        path_ = c.path;
    }
    bool scores_at_write() const override { return true; }
    void on_write(const WriteEvent& e, ScorerState*, float* scores) const override {
        gates_->predict(e.layer, e.hidden, e.T, scores);
    }
    void score_prefill(const PrefillScoreInput&, std::vector<std::vector<float>>&) const override {}

private:
    std::shared_ptr<const SpkvGates> gates_;
    std::string path_;
};
}  // namespace

void register_spkv() {
    register_preset({"spkv", "learned utility gates trained with the model (SP-KV)", [](PolicyParams& p) {
                         Policy pol;
                         pol.scorer = std::make_shared<SpkvScorer>();
                         pol.admission.kind = Rule::Kind::kThreshold;
                         // rule=threshold is the only rule (accepted so `eval sweep --thresholds` can name it).
                         require(p.get_string("rule", "threshold") == "threshold",
                                 "policy spkv keeps an entry iff u ≥ tau: rule must be threshold");
                         pol.admission.tau = p.get_double("tau", 0.5);
                         require(pol.admission.tau >= 0 && pol.admission.tau <= 1, "policy spkv: tau=", pol.admission.tau,
                                 " is not a utility in [0, 1]");
                         const int64_t w = p.get_int("window", 128), s = p.get_int("sinks", 0);
                         require(w >= 0 && s >= 0, "policy spkv: window and sinks must be ≥ 0");
                         pol.window = static_cast<int>(w);
                         pol.sinks = static_cast<int>(s);
                         pol.timing = w > 0 ? Timing::kAtWindowExit : Timing::kAtWrite;
                         pol.gated_prefill = p.get_int("sparse_prefill", 1) != 0;  // the paper's prefill (eqs. 3–5)
                         return pol;
                     }});
}

}  // namespace kvsieve
