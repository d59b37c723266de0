// spkv: SP-KV's learned utility gates (Szilvasy, Faysse et al., "Self-Pruned Key-Value Attention"; docs/design.md
// §5.3). Each entry's utility u = σ(f_l(h)) ∈ (0, 1) per KV head is predicted from the token's attention-input hidden
// state when it is written (eq. 1; predict/spkv_gates.h, gates stored in the model's own GGUF). The entry stays in the
// local window (w = 128, the paper's default; by default the window the gates were trained with, from the GGUF's
// kvsieve.predictor.spkv.window) and is kept beyond it iff u ≥ τ (the paper's hard threshold, eq. 7; by default the τ
// the gates were trained with, kvsieve.predictor.spkv.tau, else 0.5), in prefill and decode alike. Optional sinks (by
// default the trained ones). Precedence of each: spec > the GGUF's trained defaults > 0.5, 128, 0
// (policy/learned_rule.h), applied when the model is bound.
// The prefill is gated as the paper's (eqs. 3–5): each query sees its window and the admitted keys only, what a
// decode step would see (sparse_prefill=0: dense prefill, admission afterwards).
//   spkv[:tau=0.5][,window=128][,sinks=0][,sparse_prefill=1][,rule=threshold]
#include <memory>

#include "io/gguf.h"
#include "policy/learned_rule.h"
#include "policy/policy.h"
#include "predict/predictor_registry.h"
#include "predict/spkv_gates.h"
#include "util/error.h"

namespace kvsieve {

namespace {
class SpkvScorer : public EntryScorer {
public:
    /// spec: the threshold block as the spec gave it (the model's trained defaults fill the rest in for_model);
    /// gates: the model's gates (null until for_model).
    explicit SpkvScorer(ThresholdSpec spec, std::shared_ptr<const SpkvGates> gates = nullptr)
        : spec_(std::move(spec)), gates_(std::move(gates)) {}
    std::string name() const override { return "spkv"; }
    /// A scorer holding the gates of the model's GGUF. Throws Error for a model without a file, gates that do not
    /// fit it, or trained values out of range.
    std::shared_ptr<const Scorer> for_model(const ModelConfig& c) const override {
        require(!c.path.empty(), "policy spkv reads its gates from the model's GGUF, and this model has no file");
        // One load per model file serves every policy and sequence (predict/predictor_registry.h); the gates carry
        // the GGUF's trained defaults (kvsieve.predictor.spkv.{tau,window,sinks}).
        auto gates = PredictorRegistry::instance().get<SpkvGates>(
            "spkv", c.path, cat("L=", c.n_layer, ",D=", c.n_embd, ",Hkv=", c.n_head_kv),
            [&](const std::string& p) { return SpkvGates::load(GGUFFile(p), c.n_layer, c.n_embd, c.n_head_kv); });
        auto bound = std::make_shared<SpkvScorer>(spec_, std::move(gates));
        Policy check;  // the trained values' ranges, checked here as before any sequence uses them
        bound->adjust_policy(check);
        return bound;
    }
    /// The threshold block from the spec, else the gates' trained defaults (the utilities mean "keep beyond this
    /// window"), else the paper's τ = 0.5, w = 128, s = 0 (policy/learned_rule.h).
    void adjust_policy(Policy& p) const override {
        apply_threshold_rule("spkv", spec_, gates_ ? gates_->trained_defaults() : TrainedDefaults{},
                             ThresholdPreset{0.5, 128, 0, 0.0, 1.0}, p);
    }
    void on_write(const StepEvent& e, float* scores) const override {
        gates_->predict(e.step.layer, e.step.hidden, e.step.T, scores);
    }

private:
    ThresholdSpec spec_;
    std::shared_ptr<const SpkvGates> gates_;
};
}  // namespace

void register_spkv() {
    register_preset(
        {"spkv",
         "learned utility gates trained with the model (SP-KV)",
         {enum_param("rule", {"threshold"}, "threshold", "the only rule: keep an entry iff u ≥ τ", "SP-KV eq. 7"),
          real_param("tau", 0, 1, "0.5", "τ: keep an entry beyond the window iff its utility u ≥ τ",
                     "SP-KV eq. 7 (hard threshold)"),
          with_note(
              int_param("window", 0, kMaxTokens, "", "w: recent entries always kept (0: at write)", "SP-KV §3 (128)"),
              "the gates' trained window (GGUF kvsieve.predictor.spkv.window), else 128"),
          with_note(int_param("sinks", 0, kMaxTokens, "", "s: first entries always kept", "StreamingLLM §3.2"),
                    "the gates' trained sinks (GGUF kvsieve.predictor.spkv.sinks), else 0"),
          flag_param("sparse_prefill", "1", "1: gated prefill as the paper's; 0: dense, admission afterwards",
                     "SP-KV eqs. 3–5")},
         [](PolicyParams& p) {
             Policy pol;
             // rule=threshold is the only rule (accepted so `eval sweep --thresholds` can name it).
             (void)p.get_string("rule");
             const ThresholdSpec spec = read_threshold_spec(p);
             // The preset's defaults until for_model, where the gates' trained defaults may replace them.
             apply_threshold_rule("spkv", spec, TrainedDefaults{}, ThresholdPreset{0.5, 128, 0, 0.0, 1.0}, pol);
             pol.scorer = std::make_shared<SpkvScorer>(spec);
             return pol;
         },
         trained_defaults_note("tau, window and sinks",
                               "the model GGUF's kvsieve.predictor.spkv.*, read when the model is bound")});
}

}  // namespace kvsieve
