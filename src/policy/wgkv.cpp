// wgkv: WG-KV's learned write gates (Huang et al., "Learning What to Write: Write-Gated KV"; docs/design.md §5.4). Each
// entry's gate g ∈ (0, 1) per KV head is computed from its own key before and after RoPE when it is written (§3.2;
// predict/wgkv_gates.h, gates in a safetensors file of the reference layout). The entry stays in the local window (w =
// 256, the paper's default) and is promoted to the global cache when it leaves the window iff g ≥ τ (lazy promotion,
// §4.3; τ = 0.1), in prefill and decode alike; no sinks by default. The prefill is sparse as the paper's (§4.2, the
// "vertical-slash" pattern): each query sees its window (the slash) and the admitted keys before it (the verticals),
// what a decode step at its position sees (sparse_prefill=0: dense prefill, admission afterwards).
//   wgkv:model=PATH[,tau=0.1][,window=256][,sinks=0][,sparse_prefill=1][,rule=threshold]
// PATH: a .safetensors file or a directory holding model.safetensors (`kvsieve train wgkv` writes one). When the
// directory has the config.json the trainer writes, its tau, window and sinks are the defaults (the gates were
// trained for them); otherwise the paper's 0.1, 256 and 0. Precedence: spec > config.json > paper.
#include <memory>

#include "policy/learned_rule.h"
#include "policy/policy.h"
#include "predict/learned_methods.h"
#include "predict/predictor_registry.h"
#include "predict/wgkv_gates.h"
#include "util/error.h"

namespace kvsieve {

namespace {
/// The paper's defaults for what the spec and the gates' config.json leave out: τ = 0.1, w = 256 (§4.3), no sinks;
/// τ ∈ [0, 1].
const ThresholdPreset kWgkvPaper{0.1, 256, 0, 0.0, 1.0};

class WgkvScorer : public EntryScorer {
public:
    /// path: the gates file; gates: its gates loaded for a model (null until for_model).
    explicit WgkvScorer(std::string path, std::shared_ptr<const WgkvGates> gates = nullptr)
        : path_(std::move(path)), gates_(std::move(gates)) {}
    std::string name() const override { return "wgkv"; }
    /// A scorer holding the gates loaded for the model's shape. Throws Error for gates of another shape.
    std::shared_ptr<const Scorer> for_model(const ModelConfig& c) const override {
        // One load per file and model shape serves every policy and sequence (predict/predictor_registry.h); the
        // shapes are checked against the model here.
        return std::make_shared<WgkvScorer>(
            path_, PredictorRegistry::instance().get<WgkvGates>(
                       "wgkv", path_, cat("L=", c.n_layer, ",Hkv=", c.n_head_kv, ",d=", c.head_dim),
                       [&](const std::string& p) { return WgkvGates::load(p, c.n_layer, c.n_head_kv, c.head_dim); }));
    }
    void on_write(const StepEvent& e, float* scores) const override {
        gates_->predict(e.step.layer, e.step.k_pre, e.step.k, e.step.T, scores);
    }

private:
    std::string path_;
    std::shared_ptr<const WgkvGates> gates_;
};
}  // namespace

void register_wgkv() {
    register_preset(
        {"wgkv",
         "learned write gates on pre/post-RoPE keys, distilled (WG-KV)",
         {with_note(name_param("model", "",
                               "the gates: a .safetensors file or a directory with model.safetensors "
                               "(a registered predictor name under kvsieve serve)",
                               "WG-KV §3.2"),
                    "the predictor trained for the loaded model (models/, by model digest)"),
          enum_param("rule", {"threshold"}, "threshold", "the only rule: promote an entry iff g ≥ τ", "WG-KV §4.3"),
          with_note(real_param("tau", kWgkvPaper.tau_min, kWgkvPaper.tau_max, "",
                               "τ: promote an entry leaving the window iff its gate g ≥ τ",
                               cat("WG-KV §4.3 (", kWgkvPaper.tau, ")")),
                    cat("the gates' config.json tau, else ", kWgkvPaper.tau)),
          with_note(int_param("window", 0, kMaxTokens, "", "w: recent entries always kept (0: at write)",
                              cat("WG-KV §4.3 (", kWgkvPaper.window, ")")),
                    cat("the gates' config.json window, else ", kWgkvPaper.window)),
          with_note(int_param("sinks", 0, kMaxTokens, "", "s: first entries always kept", "StreamingLLM §3.2"),
                    cat("the gates' config.json sinks, else ", kWgkvPaper.sinks)),
          flag_param("sparse_prefill", "1", "1: vertical-slash sparse prefill as the paper's; 0: dense", "WG-KV §4.2")},
         [](PolicyParams& p) {
             const std::string path = p.get_model_path("gates .safetensors or directory");
             Policy pol;
             pol.scorer = std::make_shared<WgkvScorer>(path);
             (void)p.get_string("rule");
             // τ, w, s: the spec's, else the training's (the config.json beside the gates, the block the
             // loaded gates carry), else the paper's 0.1, 256, 0 (policy/learned_rule.h).
             apply_threshold_rule("wgkv", read_threshold_spec(p), read_trained_defaults(path, "wgkv"), kWgkvPaper, pol);
             return pol;
         },
         trained_defaults_note(find_learned_method("wgkv")->trained_keys, "the gates' config.json")});
}

}  // namespace kvsieve
