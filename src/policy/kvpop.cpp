// kvpop, kvpop_mlp: fixed-budget learned eviction (Hauzenberger et al., "KVpop — Key-Value Cache Compression with
// Predictive Online Pruning", §3; docs/design.md §5.5). Every KV head keeps at most B = s + w + k entries (eq. 1): s
// sinks, the protected window of the w most recent, and the k long-range entries of highest effective score. An entry
// is scored once, when it becomes eligible (leaves the window), by a learned scorer on its key and value
// (predict/kvpop_scorer.h):
//   kvpop      the per-head mLSTM read *delayed*: the leaving entry u is scored with its own query against the head's
//              recurrent state at the step q = u + w that pushes it out (eqs. 41–42); delayed=0 reads at write;
//   kvpop_mlp  the stateless MLP (eqs. 35–36), scored at write.
// Whenever the long-range region holds more than k entries the lowest effective score r + ⌊(q − t)/n⌋ · log γ_h
// (eqs. 5, 18–21; learned per-head decay) is evicted, after each prefill chunk and at every decode step, so the
// memory of a sequence is constant once the budget is reached. The mLSTM state (per sequence, layer and KV head: C,
// n, m, and the last w queries q̃ awaiting their delayed readout) lives in the cache's scorer state.
//   kvpop:model=PATH,capacity=B[,sinks=4][,window=256][,delayed=1]   kvpop_mlp:model=PATH,capacity=B[,sinks][,window]
// (capacity B, formerly `budget`, which stays accepted as a deprecated alias; docs/glossary.md)
// PATH: a .safetensors file or a directory with model.safetensors and config.json (`kvsieve train kvpop` writes
// one); the config's sinks, window and delayed are the defaults (what the scorer was trained for), else 4, 256, 1.
#include <cmath>
#include <memory>

#include "policy/learned_rule.h"
#include "policy/policy.h"
#include "policy/position_scores.h"
#include "predict/kvpop_scorer.h"
#include "predict/learned_methods.h"
#include "predict/predictor_registry.h"
#include "util/error.h"

namespace kvsieve {

namespace {

/// The mLSTM memory of one sequence.
class KvpopState : public ScorerState {
public:
    /// delayed: the queries of the last w tokens wait in a ring for their readout (none for an immediate readout).
    KvpopState(const KvpopScorerNet& net, int n_heads, int64_t window, bool delayed) {
        mem.assign(n_heads, net.new_state());
        const size_t ring_floats = delayed ? static_cast<size_t>(std::max<int64_t>(window, 1)) * net.feature_dim() : 0;
        ring.assign(n_heads, std::vector<float>(ring_floats));
        pending.resize(n_heads);
    }
    std::vector<MlstmState> mem;           // [L·Hkv]
    std::vector<std::vector<float>> ring;  // [L·Hkv][w][f]: q̃ of the last w tokens
    std::vector<PositionScores> pending;   // delayed scores computed, not yet read at exit
    /// C and n of every head, the queries awaiting their readout, and the pending scores (as a hash map held them:
    /// the figure reported before they became a flat list, kept comparable).
    uint64_t bytes() const override {
        uint64_t b = 0;
        for (const auto& m : mem) b += (m.C.size() + m.n.size() + 1) * sizeof(float);
        for (const auto& r : ring) b += r.size() * sizeof(float);
        for (const auto& p : pending) b += p.size() * (sizeof(int32_t) + sizeof(float) + 2 * sizeof(void*));
        return b;
    }
    void save(BinaryWriter& w) const override {
        w.pod<uint64_t>(mem.size());
        for (size_t h = 0; h < mem.size(); ++h) {
            w.vec(mem[h].C);
            w.vec(mem[h].n);
            w.pod(mem[h].m);
            w.vec(ring[h]);
            pending[h].save(w);
        }
    }
    void load(BinaryReader& r) override {
        if (r.pod<uint64_t>() != mem.size()) fail(r.what(), " does not hold a KVpop state of this model");
        for (size_t h = 0; h < mem.size(); ++h) {
            auto C = r.vec<float>(mem[h].C.size()), n = r.vec<float>(mem[h].n.size());
            if (C.size() != mem[h].C.size() || n.size() != mem[h].n.size())
                fail(r.what(), " holds a KVpop state of another shape");
            mem[h].C = std::move(C);
            mem[h].n = std::move(n);
            mem[h].m = r.pod<float>();
            auto q = r.vec<float>(ring[h].size());
            if (q.size() != ring[h].size()) fail(r.what(), " holds a KVpop state of another window");
            ring[h] = std::move(q);
            pending[h].load(r);
        }
    }
};

class KvpopScorer : public EntryScorer {
public:
    /// delayed: the mLSTM reads an entry when it leaves the window (needs a window); false: at write. net: the
    /// scorers loaded for a model of hkv KV heads (null until for_model).
    KvpopScorer(std::string path, bool want_mlstm, int64_t window, bool delayed,
                std::shared_ptr<const KvpopScorerNet> net = nullptr, int hkv = 0)
        : path_(std::move(path)), want_mlstm_(want_mlstm), window_(window), delayed_(delayed), net_(std::move(net)),
          hkv_(hkv) {}
    std::string name() const override { return want_mlstm_ ? "kvpop" : "kvpop_mlp"; }
    /// A scorer holding the scorers loaded for the model's shape. Throws Error for another shape or the other kind.
    std::shared_ptr<const Scorer> for_model(const ModelConfig& c) const override {
        // One load per file and model shape, shared (predict/predictor_registry.h).
        auto net = PredictorRegistry::instance().get<KvpopScorerNet>(
            "kvpop", path_, cat("L=", c.n_layer, ",Hkv=", c.n_head_kv, ",d=", c.head_dim),
            [&](const std::string& p) { return KvpopScorerNet::load(p, c.n_layer, c.n_head_kv, c.head_dim); });
        require(
            net->stateful() == want_mlstm_, "policy ", name(), ": '", path_, "' holds a ",
            net->stateful() ? "stateful mLSTM scorer: use policy kvpop" : "stateless MLP scorer: use policy kvpop_mlp");
        return std::make_shared<KvpopScorer>(path_, want_mlstm_, window_, delayed_, std::move(net), c.n_head_kv);
    }
    std::unique_ptr<ScorerState> new_state(const ModelConfig& c) const override {
        if (!net_->stateful()) return nullptr;
        return std::make_unique<KvpopState>(*net_, c.n_layer * c.n_head_kv, window_, delayed_);
    }
    void on_write(const StepEvent& ev, float* scores) const override {
        const LayerInputs& e = ev.step;
        if (!net_->stateful()) {
            net_->score_mlp(e.layer, e.k, e.v, e.T, scores);
            return;
        }
        auto& st = *static_cast<KvpopState*>(ev.state);
        const int d = e.head_dim, kvd = e.n_head_kv * d, f = net_->feature_dim();
        const int64_t w = window_;
        thread_local MlstmInputs in;  // working space, reused by this thread's calls
        thread_local std::vector<float> phi;
        phi.resize(2 * f);
        for (int h = 0; h < e.n_head_kv; ++h) {
            const int hi = e.layer * e.n_head_kv + h;
            MlstmState& mem = st.mem[hi];
            float* ring = st.ring[hi].data();
            for (int64_t t = 0; t < e.T; ++t) {
                const int64_t q = e.pos0 + t;
                net_->inputs(e.layer, h, e.k + t * kvd + h * d, e.v + t * kvd + h * d, in);
                net_->step(in, mem);
                if (!delayed_) {  // immediate: read at write (Fig. 5's ablation)
                    scores[t * e.n_head_kv + h] = net_->readout(e.layer, h, in.q.data(), mem);
                    continue;
                }
                scores[t * e.n_head_kv + h] = 0;  // not compared while in the window
                float* slot = ring + (q % w) * f;
                // The entry u = q − w leaves the window at this step: its query against the state at q (eqs. 41–42).
                if (q >= w) {
                    net_->features(slot, phi.data());
                    st.pending[hi].set(static_cast<int32_t>(q - w), net_->readout(e.layer, h, phi.data(), mem));
                }
                std::copy(in.q_raw.begin(), in.q_raw.end(), slot);
            }
        }
    }
    float on_window_exit(const WindowExitEvent& e) const override {
        if (!e.state || !delayed_) return e.score;
        auto& pend = static_cast<KvpopState*>(e.state)->pending[e.layer * hkv_ + e.head];
        float r = e.score;
        pend.take(e.pos, r);
        return r;
    }
    /// r + ⌊(q − t)/n⌋ · log γ_h with q = now − 1, the newest position (eq. 5).
    float effective_score(float stored, int32_t pos, int64_t now, int layer, int head) const override {
        const int64_t age = std::max<int64_t>(now - 1 - pos, 0) / net_->config().decay_every;
        return stored + static_cast<float>(age) * net_->log_gamma(layer, head);
    }

private:
    std::string path_;
    bool want_mlstm_;
    int64_t window_;
    bool delayed_;
    std::shared_ptr<const KvpopScorerNet> net_;
    int hkv_ = 0;
};

Policy make_kvpop(PolicyParams& p, bool mlstm) {
    const std::string name = mlstm ? "kvpop" : "kvpop_mlp";
    const std::string path = p.get_model_path("scorer .safetensors or directory");
    // sinks, window, delayed: the spec's, else what the scorer was trained for (its config.json, the block the loaded
    // scorer carries), else the paper's s = 4, w = 256, delayed readout (policy/learned_rule.h).
    const TrainedDefaults trained = read_kvpop_config(path).trained;
    const std::optional<int64_t> s_spec = given_int(p, "sinks"), w_spec = given_int(p, "window");
    if (!s_spec) check_trained_tokens(name, trained, "sinks", trained.sinks);
    if (!w_spec) check_trained_tokens(name, trained, "window", trained.window);
    const int64_t s = spec_trained_preset<int64_t>(s_spec, trained.sinks, 4);
    const int64_t w = spec_trained_preset<int64_t>(w_spec, trained.window, 256);
    // B: the spec's, else the operating point the scorer's card records (config.json "capacity").
    require(p.has("capacity") || trained.capacity, "policy ", name,
            ": capacity=B (entries per KV head, B = sinks + window + k) is required (the scorer records none)");
    const int64_t B = p.has("capacity") ? p.get_int("capacity", 0) : *trained.capacity;
    require(B > s + w, "policy ", name, ": capacity=", B, " leaves no long-range entries beyond sinks=", s,
            " and window=", w, " (B = s + w + k with k ≥ 1)");
    const std::optional<int64_t> delayed_spec = given_int(p, "delayed");
    const bool delayed = spec_trained_preset<bool>(
        delayed_spec ? std::optional<bool>(*delayed_spec != 0) : std::nullopt, trained.delayed, true);
    require(mlstm || !p.has("delayed") || !delayed,
            "policy kvpop_mlp scores at write: delayed=1 needs the mLSTM (kvpop)");
    Policy pol;
    pol.scorer = std::make_shared<KvpopScorer>(path, mlstm, w, delayed && mlstm && w > 0);
    pol.sinks = static_cast<int>(s);
    pol.window = static_cast<int>(w);
    pol.compression.kind = Rule::Kind::kHeadBudget;
    pol.compression.budget = B - s - w;
    pol.timing = Timing::kEveryNDecodeSteps;  // after the prompt (each chunk) and at every decode step
    pol.every_n = 1;
    return pol;
}

std::string kvpop_defaults_note() {
    return trained_defaults_note(find_learned_method("kvpop")->trained_keys, "the scorer's config.json");
}

std::vector<ParamDecl> kvpop_params() {
    return {with_note(name_param("model", "",
                                 "the scorer: a .safetensors file or a directory with model.safetensors and "
                                 "config.json (a registered predictor name under kvsieve serve)",
                                 "KVpop §3"),
                      "the predictor trained for the loaded model (models/, by model digest)"),
            with_alias(with_note(int_param("capacity", 1, kMaxTokens, "",
                                           "B = s + w + k: entries each KV head keeps (k ≥ 1)", "KVpop eq. 1"),
                                 "the scorer's config.json capacity, else required"),
                       "budget"),
            with_note(int_param("sinks", 0, kMaxTokens, "", "s: first entries always kept", "KVpop eq. 1"),
                      "the scorer's config.json sinks, else 4"),
            with_note(int_param("window", 0, kMaxTokens, "", "w: recent entries always kept", "KVpop eq. 1"),
                      "the scorer's config.json window, else 256"),
            with_note(flag_param("delayed", "",
                                 "1: read the mLSTM when the entry leaves the window; 0: at write "
                                 "(kvpop_mlp: 0 only)",
                                 "KVpop eqs. 41–42"),
                      "the scorer's config.json delayed, else 1")};
}
}  // namespace

void register_kvpop() {
    register_preset({"kvpop", "fixed-budget eviction, delayed mLSTM scorer (KVpop)", kvpop_params(),
                     [](PolicyParams& p) { return make_kvpop(p, true); }, kvpop_defaults_note()});
    register_preset({"kvpop_mlp", "fixed-budget eviction, stateless MLP scorer (KVpop_mlp)", kvpop_params(),
                     [](PolicyParams& p) { return make_kvpop(p, false); }, kvpop_defaults_note()});
}

}  // namespace kvsieve
