// hybrid_heads: a static hybrid of local and global attention heads (SP-KV §4, "Self-Pruned Key-Value Attention",
// Szilvasy, Faysse et al.): the listed (layer, KV head) pairs are global (they keep every entry), every other head
// keeps only its sink tokens and local window. It evaluates a hybrid layout chosen from measured head densities
// (`kvsieve eval density --hybrid`) against fixed layouts such as 3 local layers to 1 global.
//   hybrid_heads:global=L.H/L.H/...[,window=128][,sinks=0]      ("global=" with no pairs: every head local)
// Each entry's score is 1 on a global head and 0 on a local one, written before attention; admission at window
// exit keeps score ≥ 0.5; prefill is gated like SP-KV's, so a local head's queries see only their window.
#include <set>
#include <sstream>
#include <utility>

#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

namespace {
class StaticHeadScorer : public EntryScorer {
public:
    explicit StaticHeadScorer(std::set<std::pair<int, int>> global) : global_(std::move(global)) {}
    std::string name() const override { return "hybrid_heads"; }
    /// Checks that every global head exists in the model.
    std::shared_ptr<const Scorer> for_model(const ModelConfig& c) const override {
        for (const auto& [l, h] : global_)
            require(l < c.n_layer && h < c.n_head_kv, "policy hybrid_heads: head ", l, ".", h,
                    " is outside the model's ", c.n_layer, " layers and ", c.n_head_kv, " KV heads");
        return shared_from_this();
    }
    void on_write(const StepEvent& e, float* scores) const override {
        const int Hkv = e.step.n_head_kv;
        for (int64_t t = 0; t < e.step.T; ++t)
            for (int h = 0; h < Hkv; ++h) scores[t * Hkv + h] = global_.count({e.step.layer, h}) ? 1.0f : 0.0f;
    }

private:
    std::set<std::pair<int, int>> global_;
};

/// "0.1/3.2" → {(0, 1), (3, 2)}. Throws Error naming a malformed pair.
std::set<std::pair<int, int>> parse_heads(const std::string& s) {
    std::set<std::pair<int, int>> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, '/');) {
        if (item.empty()) continue;
        const size_t dot = item.find('.');
        int l = -1, h = -1;
        try {
            require(dot != std::string::npos, "");
            size_t a = 0, b = 0;
            l = std::stoi(item.substr(0, dot), &a);
            h = std::stoi(item.substr(dot + 1), &b);
            require(a == dot && b == item.size() - dot - 1, "");
        } catch (...) { fail("policy hybrid_heads: '", item, "' is not a LAYER.HEAD pair (global=0.1/3.2/...)"); }
        require(l >= 0 && h >= 0, "policy hybrid_heads: '", item, "' has a negative index");
        out.insert({l, h});
    }
    return out;
}
}  // namespace

void register_hybrid_heads() {
    register_preset({"hybrid_heads",
                     "static local/global heads (SP-KV §4 hybrid design)",
                     {with_note(name_param("global", "",
                                           "the global heads as LAYER.HEAD pairs joined by '/' (empty: every "
                                           "head local)",
                                           "SP-KV §4"),
                                "required"),
                      int_param("window", 1, kMaxTokens, "128", "w: recent entries every head keeps", "SP-KV §4"),
                      int_param("sinks", 0, kMaxTokens, "0", "s: first entries every head keeps", "StreamingLLM §3.2")},
                     [](PolicyParams& p) {
                         require(p.has("global"), "policy hybrid_heads needs global=L.H/L.H/... (the global heads)");
                         Policy pol;
                         pol.scorer = std::make_shared<StaticHeadScorer>(parse_heads(p.get_string("global", "")));
                         pol.admission.kind = Rule::Kind::kThreshold;
                         pol.admission.tau = 0.5;
                         const int64_t w = p.get_int("window"), s = p.get_int("sinks");
                         pol.window = static_cast<int>(w);
                         pol.sinks = static_cast<int>(s);
                         pol.timing = Timing::kAtWindowExit;
                         pol.gated_prefill = true;
                         return pol;
                     }});
}

}  // namespace kvsieve
