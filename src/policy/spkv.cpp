// spkv: SP-KV's learned utility gates (Szilvasy, Faysse et al., "Self-Pruned Key-Value Attention"; docs/design.md
// §5.3). Each entry's utility u = σ(f_l(h)) ∈ (0, 1) per KV head is predicted from the token's attention-input hidden
// state when it is written (eq. 1; predict/spkv_gates.h). The gates are the model's own (tensors in its GGUF, when it
// was trained with them), else those of the predictor folder `model=` names, else the folder trained for the loaded
// model (predict/bundled_predictors.h, by model digest: gates trained on a frozen model, predict/spkv_export.h). The
// entry stays in the local window (w = 128, the paper's default; by default the window the gates were trained with,
// kvsieve.predictor.spkv.window in the GGUF or config.json's window) and is kept beyond it iff u ≥ τ (the paper's hard
// threshold, eq. 7; by default the τ the gates were trained with, else 0.5), in prefill and decode alike. Optional
// sinks (by default the trained ones). Precedence of each: spec > the gates' trained defaults > 0.5, 128, 0
// (policy/learned_rule.h), applied when the model is bound.
// The prefill is gated as the paper's (eqs. 3–5): each query sees its window and the admitted keys only, what a
// decode step would see (sparse_prefill=0: dense prefill, admission afterwards).
//   spkv[:model=DIR][,tau=0.5][,window=128][,sinks=0][,sparse_prefill=1][,rule=threshold]
// DIR: a predictor folder (model.safetensors + config.json), a gates .safetensors file, or a GGUF holding gates; it
// takes precedence over gates in the model's own GGUF.
#include <memory>

#include "io/gguf.h"
#include "policy/learned_rule.h"
#include "policy/policy.h"
#include "predict/bundled_predictors.h"
#include "predict/learned_methods.h"
#include "predict/predictor_registry.h"
#include "predict/spkv_gates.h"
#include "util/error.h"

namespace kvsieve {

namespace {
/// The paper's defaults for what the spec and the gates leave out: τ = 0.5 (eq. 7), w = 128 (§3), no sinks; τ ∈ [0, 1].
const ThresholdPreset kSpkvPaper{0.5, 128, 0, 0.0, 1.0};

class SpkvScorer : public EntryScorer {
public:
    /// spec: the threshold block as the spec gave it (the gates' trained defaults fill the rest in for_model); path:
    /// the gates model= named ("": the model's own, else the predictor trained for it); gates: the gates bound to a
    /// model (null until for_model).
    explicit SpkvScorer(ThresholdSpec spec, std::string path = "", std::shared_ptr<const SpkvGates> gates = nullptr)
        : spec_(std::move(spec)), path_(std::move(path)), gates_(std::move(gates)) {}
    std::string name() const override { return "spkv"; }
    /// A scorer holding the gates for the model. Throws Error for a model without gates (none in its GGUF, none
    /// named, none trained for it), gates that do not fit it, or trained values out of range.
    std::shared_ptr<const Scorer> for_model(const ModelConfig& c) const override {
        std::string path = path_;
        if (path.empty()) {
            require(!c.path.empty(),
                    "policy spkv reads its gates from the model's GGUF or a predictor folder (model=), and this model "
                    "has no file");
            if (has_spkv_gates(GGUFFile(c.path))) {
                path = c.path;
            } else {
                try {
                    path = default_predictor_path("spkv");
                } catch (const Error& e) {
                    fail("model '", c.path, "' has no SP-KV gates (tensors blk.<layer>.spkv.*) and none were found ",
                         "beside it: ", e.what());
                }
            }
        }
        // One load per file and model shape serves every policy and sequence (predict/predictor_registry.h); the
        // gates carry their trained defaults (the GGUF's kvsieve.predictor.spkv.* or the folder's config.json).
        auto gates = PredictorRegistry::instance().get<SpkvGates>(
            "spkv", path, cat("L=", c.n_layer, ",D=", c.n_embd, ",Hkv=", c.n_head_kv),
            [&](const std::string& p) { return SpkvGates::load(p, c.n_layer, c.n_embd, c.n_head_kv); });
        auto bound = std::make_shared<SpkvScorer>(spec_, path_, std::move(gates));
        Policy check;  // the trained values' ranges, checked here as before any sequence uses them
        bound->adjust_policy(check);
        return bound;
    }
    /// The threshold block from the spec, else the gates' trained defaults (the utilities mean "keep beyond this
    /// window"), else the paper's τ = 0.5, w = 128, s = 0 (policy/learned_rule.h).
    void adjust_policy(Policy& p) const override {
        apply_threshold_rule("spkv", spec_, gates_ ? gates_->trained_defaults() : TrainedDefaults{}, kSpkvPaper, p);
    }
    void on_write(const StepEvent& e, float* scores) const override {
        gates_->predict(e.step.layer, e.step.hidden, e.step.T, scores);
    }

private:
    ThresholdSpec spec_;
    std::string path_;
    std::shared_ptr<const SpkvGates> gates_;
};
}  // namespace

void register_spkv() {
    register_preset(
        {"spkv",
         "learned utility gates trained with the model (SP-KV)",
         {with_note(name_param("model", "",
                               "the gates: a predictor folder, a .safetensors file or a GGUF holding them "
                               "(a registered predictor name under kvsieve serve)",
                               "SP-KV eq. 1"),
                    "the model's own gates (its GGUF), else the predictor trained for the loaded model (models/, by "
                    "model digest)"),
          enum_param("rule", {"threshold"}, "threshold", "the only rule: keep an entry iff u ≥ τ", "SP-KV eq. 7"),
          real_param("tau", kSpkvPaper.tau_min, kSpkvPaper.tau_max, cat(kSpkvPaper.tau),
                     "τ: keep an entry beyond the window iff its utility u ≥ τ", "SP-KV eq. 7 (hard threshold)"),
          with_note(int_param("window", 0, kMaxTokens, "", "w: recent entries always kept (0: at write)",
                              cat("SP-KV §3 (", kSpkvPaper.window, ")")),
                    cat("the gates' trained window (GGUF kvsieve.predictor.spkv.window or config.json), else ",
                        kSpkvPaper.window)),
          with_note(int_param("sinks", 0, kMaxTokens, "", "s: first entries always kept", "StreamingLLM §3.2"),
                    cat("the gates' trained sinks (GGUF kvsieve.predictor.spkv.sinks or config.json), else ",
                        kSpkvPaper.sinks)),
          flag_param("sparse_prefill", "1", "1: gated prefill as the paper's; 0: dense, admission afterwards",
                     "SP-KV eqs. 3–5")},
         [](PolicyParams& p) {
             Policy pol;
             // rule=threshold is the only rule (accepted so `eval sweep --thresholds` can name it).
             (void)p.get_string("rule");
             const ThresholdSpec spec = read_threshold_spec(p);
             // The preset's defaults until for_model, where the gates' trained defaults may replace them.
             apply_threshold_rule("spkv", spec, TrainedDefaults{}, kSpkvPaper, pol);
             // model= names the gates; without it the model's own or the ones trained for it, found in for_model.
             const std::string path = p.has("model") ? p.get_model_path("gates folder") : std::string();
             pol.scorer = std::make_shared<SpkvScorer>(spec, path);
             return pol;
         },
         trained_defaults_note(
             find_learned_method("spkv")->trained_keys,
             "the gates' GGUF kvsieve.predictor.spkv.* or config.json, read when the model is bound")});
}

}  // namespace kvsieve
