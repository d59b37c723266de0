// kvzap: learned admission from hidden states (KVzap paper §3.3, Alg. 1; kvpress KVzapPress inside DMSPress).
// A per-layer surrogate f_l (linear or MLP, predict/kvzap_model.h) maps each token's attention-input hidden
// state to a predicted log KVzip+ score per KV head, once, when the entry is written (the on_write event, before
// attention). The entry stays in the local window (w = 128 by default) and is kept beyond it iff its score ≥ τ
// (log space; the paper's defaults are −4 for Qwen3-8B and −7 for Llama-3.1-8B), in prefill and decode alike.
// Optional sinks (sinks=4).
// rule=head|layer ranks the same scores by a budget after the prefill instead (kvpress kvzap_mlp_head and
// kvzap_mlp_layer); window=0 judges each entry as it is written (the paper's window ablation).
//   kvzap:model=DIR[,tau=-4][,window=128][,sinks=0]   kvzap:model=DIR,rule=head|layer,ratio=R[,sinks=S,window=W]
// With rule=threshold, τ, w and s left out of the spec come from the checkpoint's config.json (the trained defaults
// `kvsieve train kvzap` records, predict/trained_defaults.h), else −4, 128, 0 (policy/learned_rule.h).
#include <limits>
#include <map>
#include <memory>

#include "policy/learned_rule.h"
#include "policy/policy.h"
#include "predict/kvzap_model.h"
#include "predict/learned_methods.h"
#include "predict/predictor_registry.h"
#include "util/error.h"

namespace kvsieve {

namespace {
class KVzapScorer : public EntryScorer {
public:
    KVzapScorer(std::shared_ptr<const KVzapModel> m, std::string dir) : m_(std::move(m)), dir_(std::move(dir)) {}
    std::string name() const override { return "kvzap"; }

    /// Checks the surrogate's shape against the model; the surrogate itself serves any sequence of it.
    std::shared_ptr<const Scorer> for_model(const ModelConfig& c) const override {
        require(m_->n_layers() == c.n_layer, "kvzap checkpoint '", dir_, "' has ", m_->n_layers(),
                " layers, the model ", c.n_layer);
        require(m_->input_dim() == c.n_embd, "kvzap checkpoint '", dir_, "' takes inputs of size ", m_->input_dim(),
                ", the model's hidden size is ", c.n_embd);
        require(m_->output_dim() == c.n_head_kv, "kvzap checkpoint '", dir_, "' predicts ", m_->output_dim(),
                " heads, the model has ", c.n_head_kv, " KV heads");
        return shared_from_this();
    }

    void on_write(const StepEvent& e, float* scores) const override {
        // [T][Hkv], one prediction per token serves every head
        m_->predict(e.step.layer, e.step.hidden, e.step.T, scores);
    }

private:
    std::shared_ptr<const KVzapModel> m_;
    std::string dir_;
};
}  // namespace

/// The paper's defaults for what the spec and the checkpoint's config.json leave out: τ = −4 (§3.3, Qwen3-8B),
/// w = 128 (Alg. 1), no sinks.
const ThresholdPreset kKvzapPaper{-4, 128, 0};

void register_kvzap() {
    const double inf = std::numeric_limits<double>::infinity();
    register_preset(
        {"kvzap", "learned admission from hidden states (KVzap)",
         merge_params(
             budget_rule_params("0.5", "head"),
             {with_note(name_param("model", "",
                                   "the surrogate's checkpoint directory (a registered "
                                   "predictor name under kvsieve serve)",
                                   "KVzap §3.3 (kvpress KVzapModel)"),
                        "the predictor trained for the loaded model (models/, by model digest)"),
              enum_param("rule", {"threshold", "head", "layer"}, "threshold",
                         "threshold: admission at window exit; head|layer: the scores ranked by a "
                         "budget after the prefill (with the budget rule keys)",
                         "KVzap Alg. 1; kvpress kvzap_mlp_head / kvzap_mlp_layer"),
              real_param("tau", -inf, inf, cat(kKvzapPaper.tau), "τ: keep an entry iff its predicted log score ≥ τ",
                         "KVzap §3.3 (−4 for Qwen3-8B, −7 for Llama-3.1-8B)"),
              with_note(int_param("window", 0, kMaxTokens, "",
                                  "w: recent entries always kept (0: each entry judged at write)", "KVzap Alg. 1"),
                        cat(kKvzapPaper.window, "; 0 with rule=head|layer")),
              flag_param("sparse_prefill", "0", "1: gate the prefill by the admission (0: dense, as kvpress)",
                         "SP-KV eqs. 3–5")}),
         [](PolicyParams& p) {
             const std::string dir = p.get_model_path("checkpoint directory");
             Policy pol;
             // One load per checkpoint, shared by every policy and sequence (predict/predictor_registry.h).
             auto model = PredictorRegistry::instance().get<KVzapModel>(
                 "kvzap", dir, "", [](const std::string& d) { return KVzapModel::load(d); });
             pol.scorer = std::make_shared<KVzapScorer>(model, dir);
             const std::string rule = p.get_string("rule");
             if (rule != "threshold") {
                 // kvpress kvzap_mlp_head (KVzapPress) / kvzap_mlp_layer (AdaKVPress(KVzapPress)): the
                 // predicted scores ranked by a per-head or per-layer budget after the prefill.
                 read_budget_rule(p, pol);
                 return pol;
             }
             // Threshold rule: τ, w, s from the spec, else the checkpoint's config.json, else the
             // paper's −4, 128, 0 (policy/learned_rule.h). kvpress prefills densely and evicts after;
             // sparse_prefill=1 gates the prefill instead.
             apply_threshold_rule("kvzap", read_threshold_spec(p), model->trained_defaults(), kKvzapPaper, pol);
             return pol;
         },
         trained_defaults_note(find_learned_method("kvzap")->trained_keys + " (rule=threshold)",
                               "the checkpoint's config.json")});
}

}  // namespace kvsieve
