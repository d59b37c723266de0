// spkv: SP-KV's learned utility gates (Szilvasy, Faysse et al., "Self-Pruned Key-Value Attention"; DESIGN §5).
// Each entry's utility u = σ(f_l(h)) ∈ (0, 1) per KV head is predicted from the token's attention-input hidden state
// when it is written (eq. 1; predict/spkv_gates.h, gates stored in the model's own GGUF). The entry stays in the local
// window (w = 128, the paper's default; by default the window the gates were trained with, from the GGUF's
// kvsieve.predictor.spkv.window) and is kept beyond it iff u ≥ τ (the paper's hard threshold, eq. 7; τ = 0.5 by
// default), in prefill and decode alike. Optional sinks (by default the trained ones).
// The prefill is gated as the paper's (eqs. 3–5): each query sees its window and the admitted keys only, what a
// decode step would see (sparse_prefill=0: dense prefill, admission afterwards).
//   spkv[:tau=0.5][,window=128][,sinks=0][,sparse_prefill=1][,rule=threshold]
#include <memory>

#include "io/gguf.h"
#include "policy/policy.h"
#include "predict/predictor_registry.h"
#include "predict/predictor_tensors.h"
#include "predict/spkv_gates.h"
#include "util/error.h"

namespace kvsieve {

namespace {
/// The gates a GGUF holds and the window and sinks they were trained with (−1: not recorded).
struct TrainedGates {
    SpkvGates gates;
    int64_t window, sinks;
};

class SpkvScorer : public Scorer {
public:
    /// window_given, sinks_given: whether the spec set them (else the model's trained values apply).
    SpkvScorer(bool window_given, bool sinks_given) : window_given_(window_given), sinks_given_(sinks_given) {}
    std::string name() const override { return "spkv"; }
    void bind(const ModelConfig& c) override {
        require(!c.path.empty(), "policy spkv reads its gates from the model's GGUF, and this model has no file");
        if (gates_ && path_ == c.path) return;
        // One load per model file serves every policy and sequence (predict/predictor_registry.h).
        const auto trained = PredictorRegistry::instance().get<TrainedGates>(
            "spkv", c.path, cat("L=", c.n_layer, ",D=", c.n_embd, ",Hkv=", c.n_head_kv), [&](const std::string& p) {
                GGUFFile f(p);
                return TrainedGates{SpkvGates::load(f, c.n_layer, c.n_embd, c.n_head_kv),
                                    f.get_int(predictor_metadata_key("spkv", "window"), -1),
                                    f.get_int(predictor_metadata_key("spkv", "sinks"), -1)};
            });
        require(trained->window <= kMaxTokens && trained->sinks <= kMaxTokens, "policy spkv: the model's trained window=",
                trained->window, " and sinks=", trained->sinks, " must be at most ", kMaxTokens);
        gates_ = std::shared_ptr<const SpkvGates>(trained, &trained->gates);
        path_ = c.path;
        trained_window_ = trained->window;
        trained_sinks_ = trained->sinks;
    }
    /// The window and sinks the gates were trained with (the GGUF's kvsieve.predictor.spkv.{window,sinks}) replace
    /// the preset's defaults: the utilities mean "keep beyond this window".
    void adjust_policy(Policy& p) const override {
        if (!window_given_ && trained_window_ >= 0) {
            p.window = static_cast<int>(trained_window_);
            p.timing = p.window > 0 ? Timing::kAtWindowExit : Timing::kAtWrite;
        }
        if (!sinks_given_ && trained_sinks_ >= 0) p.sinks = static_cast<int>(trained_sinks_);
    }
    bool scores_at_write() const override { return true; }
    void on_write(const WriteEvent& e, ScorerState*, float* scores) const override {
        gates_->predict(e.layer, e.hidden, e.T, scores);
    }
    void score_prefill(const PrefillScoreInput&, std::vector<std::vector<float>>&) const override {}

private:
    bool window_given_, sinks_given_;
    std::shared_ptr<const SpkvGates> gates_;
    std::string path_;
    int64_t trained_window_ = -1, trained_sinks_ = -1;  // from the GGUF; -1: not recorded
};
}  // namespace

void register_spkv() {
    register_preset({"spkv", "learned utility gates trained with the model (SP-KV)",
                     {enum_param("rule", {"threshold"}, "threshold", "the only rule: keep an entry iff u ≥ τ",
                                 "SP-KV eq. 7"),
                      real_param("tau", 0, 1, "0.5", "τ: keep an entry beyond the window iff its utility u ≥ τ",
                                 "SP-KV eq. 7 (hard threshold)"),
                      with_note(int_param("window", 0, kMaxTokens, "", "w: recent entries always kept (0: at write)",
                                          "SP-KV §3 (128)"),
                                "the gates' trained window (GGUF kvsieve.predictor.spkv.window), else 128"),
                      with_note(int_param("sinks", 0, kMaxTokens, "", "s: first entries always kept", "StreamingLLM §3.2"),
                                "the gates' trained sinks (GGUF kvsieve.predictor.spkv.sinks), else 0"),
                      flag_param("sparse_prefill", "1", "1: gated prefill as the paper's; 0: dense, admission afterwards",
                                 "SP-KV eqs. 3–5")},
                     [](PolicyParams& p) {
                         Policy pol;
                         pol.scorer = std::make_shared<SpkvScorer>(p.has("window"), p.has("sinks"));
                         pol.admission.kind = Rule::Kind::kThreshold;
                         // rule=threshold is the only rule (accepted so `eval sweep --thresholds` can name it).
                         (void)p.get_string("rule");
                         pol.admission.tau = p.get_double("tau");
                         const int64_t w = p.get_int("window", 128), s = p.get_int("sinks", 0);
                         pol.window = static_cast<int>(w);
                         pol.sinks = static_cast<int>(s);
                         pol.timing = w > 0 ? Timing::kAtWindowExit : Timing::kAtWrite;
                         pol.gated_prefill = p.get_flag("sparse_prefill");  // the paper's prefill (eqs. 3–5)
                         return pol;
                     }});
}

}  // namespace kvsieve
