#include "train/kvpop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "io/model_digest.h"
#include "policy/running_topk.h"
#include "predict/kvpop_scorer.h"
#include "train/data.h"
#include "train/distill.h"
#include "train/kvpop_mask.h"
#include "train/kvpop_pairs.h"
#include "train/lm_eval.h"
#include "train/kvpop_predictor.h"
#include "train/kvpop_target.h"
#include "train/lm_run.h"
#include "train/loop.h"
#include "train/mirror.h"
#include "train/run_config.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve::train {

using json = nlohmann::json;

namespace {

KvpopOptions read_kvpop(const json& j) {
    check_keys(j, "kvpop", {"kind",          "window", "sinks",           "budget",      "delayed",      "decay_every",
                            "teacher_gamma", "eps",    "margin_cap",      "temperature", "queries",      "softcap",
                            "forget_bias",   "hidden", "feature",         "value",       "target_block", "mode",
                            "target",        "kl_top", "boundary_weight", "base_lr"});
    KvpopOptions o;
    o.kind = j.value("kind", o.kind);
    o.window = j.value("window", o.window);
    o.sinks = j.value("sinks", o.sinks);
    o.budget = j.value("budget", o.budget);
    o.delayed = j.value("delayed", o.delayed);
    o.decay_every = j.value("decay_every", o.decay_every);
    o.teacher_gamma = j.value("teacher_gamma", o.teacher_gamma);
    o.eps = j.value("eps", o.eps);
    o.margin_cap = j.value("margin_cap", o.margin_cap);
    o.temperature = j.value("temperature", o.temperature);
    o.queries = j.value("queries", o.queries);
    o.softcap = j.value("softcap", o.softcap);
    o.forget_bias = j.value("forget_bias", o.forget_bias);
    o.hidden = j.value("hidden", o.hidden);
    o.feature = j.value("feature", o.feature);
    o.value = j.value("value", o.value);
    o.target_block = j.value("target_block", o.target_block);
    o.mode = j.value("mode", o.mode);
    o.target = j.value("target", o.target);
    o.kl_top = j.value("kl_top", o.kl_top);
    o.boundary_weight = j.value("boundary_weight", o.boundary_weight);
    o.base_lr = j.value("base_lr", o.base_lr);
    require(o.mode == "scorer" || o.mode == "distill" || o.mode == "streaming_plus",
            "kvpop.mode must be scorer, distill or streaming_plus, got '", o.mode, "'");
    require(o.target == "dense" || o.target == "sparse", "kvpop.target must be dense or sparse, got '", o.target, "'");
    require(o.kl_top >= 1, "kvpop.kl_top must be ≥ 1");
    require(o.boundary_weight >= 0, "kvpop.boundary_weight must be ≥ 0");
    require(o.base_lr > 0, "kvpop.base_lr must be > 0");
    require(o.kind == "mlstm" || o.kind == "mlp", "kvpop.kind must be mlstm or mlp, got '", o.kind, "'");
    require(o.window >= 0 && o.sinks >= 0, "kvpop.window and kvpop.sinks must be ≥ 0");
    require(o.budget >= 1, "kvpop.budget (k, long-range entries per head) must be ≥ 1");
    require(o.decay_every >= 1, "kvpop.decay_every must be ≥ 1");
    require(o.teacher_gamma > 0 && o.teacher_gamma <= 1, "kvpop.teacher_gamma must be in (0, 1]");
    require(o.eps > 0, "kvpop.eps must be > 0");
    require(o.margin_cap > 0 && o.temperature > 0, "kvpop.margin_cap and kvpop.temperature must be > 0");
    require(o.queries >= 0, "kvpop.queries must be ≥ 0");
    require(o.softcap > 0, "kvpop.softcap must be > 0");
    require(o.target_block >= 1, "kvpop.target_block must be ≥ 1");
    return o;
}

/// The teacher of one layer: every row's and head's decisions, and the priorities they came from.
struct LayerTeacher {
    std::vector<std::vector<BoundaryPair>> pairs;  // [B·Hkv]
    std::vector<std::vector<float>> prio;          // [B·Hkv][T]
};

LayerTeacher teach(const AttnTensors& a, const KvpopOptions& o, double scale) {
    const auto fa = future_attention(a.q_post, a.k_post, a.lse, o.window, scale, o.target_block);
    const auto y = future_attention_target(fa, o.eps).contiguous();  // [B, Hkv, T]
    const int64_t B = y.size(0), H = y.size(1), T = y.size(2);
    const double lg = std::log(o.teacher_gamma);
    LayerTeacher lt;
    const float* yp = y.data_ptr<float>();
    for (int64_t bh = 0; bh < B * H; ++bh) {
        std::vector<float> p(T);
        for (int64_t t = 0; t < T; ++t)
            p[t] = static_cast<float>(yp[bh * T + t] - static_cast<double>(t / o.decay_every) * lg);
        lt.pairs.push_back(boundary_pairs(p, o.sinks, o.window, o.budget));
        lt.prio.push_back(std::move(p));
    }
    return lt;
}

/// The student's static priorities p_t = r_t − ⌊t/n⌋ log γ_h of one row and head: r [T] its scores, lg its log γ_h
/// (the effective score of eq. 5 without the part every entry shares at a step).
std::vector<float> student_priorities(const float* r, int64_t T, float lg, int64_t decay_every) {
    std::vector<float> p(T);
    for (int64_t t = 0; t < T; ++t) p[t] = r[t] - static_cast<float>(t / decay_every) * lg;
    return p;
}

/// The pair loss of one layer over `chosen` decisions [B·Hkv] of each row and head; also counts agreements.
struct PairLoss {
    torch::Tensor loss;  // weighted mean (differentiable)
    int64_t n = 0, agree = 0;
};

PairLoss pair_loss(const torch::Tensor& r, const torch::Tensor& log_gamma,
                   const std::vector<std::vector<BoundaryPair>>& chosen, const KvpopOptions& o) {
    const int64_t H = r.size(1), T = r.size(2);
    std::vector<int64_t> i_new, i_bnd;
    std::vector<float> age, lab, w;
    std::vector<int64_t> head;
    int64_t n_keep = 0, n_drop = 0;
    for (size_t bh = 0; bh < chosen.size(); ++bh)
        for (const auto& p : chosen[bh]) {
            i_new.push_back(static_cast<int64_t>(bh) * T + p.t_new);
            i_bnd.push_back(static_cast<int64_t>(bh) * T + p.t_bnd);
            // ⌊(q − t_new)/n⌋ − ⌊(q − t_bnd)/n⌋: the decay difference in units of log γ_h.
            age.push_back(static_cast<float>((p.q - p.t_new) / o.decay_every - (p.q - p.t_bnd) / o.decay_every));
            lab.push_back(p.keep ? 1.0f : -1.0f);
            w.push_back(static_cast<float>(std::min<double>(p.margin, o.margin_cap)));
            head.push_back(static_cast<int64_t>(bh) % H);
            (p.keep ? n_keep : n_drop)++;
        }
    PairLoss pl;
    pl.n = static_cast<int64_t>(lab.size());
    if (pl.n == 0) {
        pl.loss = r.sum() * 0;
        return pl;
    }
    // Keep and drop decisions carry equal total weight (App. B.5).
    for (size_t i = 0; i < w.size(); ++i)
        w[i] *= lab[i] > 0 ? 0.5f * pl.n / std::max<int64_t>(n_keep, 1) : 0.5f * pl.n / std::max<int64_t>(n_drop, 1);
    auto T64 = [](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64); };
    auto TF = [](const std::vector<float>& v) { return torch::tensor(v, torch::kFloat32); };
    const auto flat = r.reshape({-1});
    const auto diff = flat.index_select(0, T64(i_new)) - flat.index_select(0, T64(i_bnd)) +
                      TF(age) * log_gamma.index_select(0, T64(head));
    const auto l = TF(lab), wt = TF(w);
    pl.loss = (wt * torch::softplus(-l * diff / o.temperature)).sum() / wt.sum().clamp_min(1e-12);
    pl.agree = ((diff.detach() * l) > 0).sum().item<int64_t>();
    return pl;
}

/// The teacher's top-k kept set at the end of a sequence vs the student's (static priorities), and vs the k most
/// recent eligible entries: fractions of the teacher's set each keeps.
std::pair<double, double> recall_at_end(const std::vector<float>& teacher_prio, const std::vector<float>& student_prio,
                                        const KvpopOptions& o) {
    const int64_t T = static_cast<int64_t>(teacher_prio.size()), n = T - o.window - o.sinks;
    if (n <= o.budget) return {1.0, 1.0};
    auto top = [&](const std::vector<float>& p) {
        std::vector<float> e(p.begin() + o.sinks, p.begin() + o.sinks + n);
        const auto rank = priority_ranks(e);
        std::vector<char> in(n, 0);
        for (int64_t i = 0; i < n; ++i) in[i] = rank[i] < o.budget;
        return in;
    };
    const auto a = top(teacher_prio), b = top(student_prio);
    int64_t both = 0, recent = 0;
    for (int64_t i = 0; i < n; ++i) {
        both += a[i] && b[i];
        recent += a[i] && i >= n - o.budget;
    }
    return {static_cast<double>(both) / o.budget, static_cast<double>(recent) / o.budget};
}

/// What the checkpoint holds: the scorer, and the fine-tuned model in distill and streaming_plus.
struct KvpopRunModule : torch::nn::Module {
    KvpopRunModule(const KvpopPredictor& scorer, const LlamaMirror& student) {
        if (scorer) register_module("scorer", scorer);
        if (student) register_module("lm", student);
    }
};

/// One forward plan's products for a batch of tokens.
struct Pass {
    std::vector<AttnTensors> target;                          ///< per layer: q_post, k_post, lse of the target
    std::vector<std::pair<torch::Tensor, torch::Tensor>> kv;  ///< per layer: the scorer's k_post, v (detached)
    torch::Tensor student_logits;                             ///< distill, streaming_plus
    TopkTeacher teacher;                                      ///< distill, streaming_plus
};

std::vector<AttnTensors> detached(std::vector<AttnTensors> cap) {
    for (auto& a : cap) {
        for (auto* t : {&a.h, &a.k_pre, &a.k_post, &a.v, &a.lse, &a.q_post})
            if (t->defined()) *t = t->detach();
    }
    return cap;
}

}  // namespace

namespace {

/// One KVpop training run (the modes of train/kvpop.h): the frozen model, the scorer and, in the fine-tuning modes,
/// the student; the passes a step and an evaluation need, and the predictor folder it exports.
class KvpopRun {
public:
    /// Reads the config and the model (open_frozen_run), checks the lengths, builds the scorer (seeded) and the
    /// student, writes the held-out texts and announces the run. Throws Error naming the first problem.
    KvpopRun(const std::string& config_path, bool resume, bool progress);
    /// Trains and exports (TrainLoop::run_and_export); false when interrupted.
    bool run();

private:
    void check_lengths() const;
    void announce() const;
    std::vector<ParamGroup> param_groups() const;
    /// Eviction steps [B, Hkv, T] of layer l for keys and values k, v [B, Hkv, T, d]: the running top-k of the
    /// scorer's static priorities r − ⌊t/n⌋ log γ_h, or StreamingLLM's at the same budget.
    torch::Tensor evictions(int l, const torch::Tensor& k, const torch::Tensor& v);
    /// Hooks that run a forward under the eviction mask; kv_out (if set) receives each layer's keys and values.
    MirrorHooks masked(std::vector<std::pair<torch::Tensor, torch::Tensor>>* kv_out);
    /// Every forward a step (training, `grad`) or an evaluation (no gradient) needs for tokens [B, T].
    Pass make_pass(const torch::Tensor& toks, bool grad);
    /// One micro-batch: the KL of the fine-tuning modes and each layer's pair loss, back-propagated.
    MicroResult micro(int64_t step, int64_t m);
    /// The held-out evaluation: NLL of the fine-tuning modes, then the scorer's pair loss, accuracy and recall.
    json eval();
    /// The scorer's part of eval() into `e`.
    void eval_scorer(json& e);
    /// Writes the predictor folder: config.json, the scorer's model.safetensors, the fine-tuned model.gguf.
    void save_to(const std::string& dir);

    KvpopOptions ko_;  // read by open_frozen_run's section reader, so declared before run_
    FrozenModelRun run_;
    ModelConfig c_;
    bool tunes_lm_ = false, has_scorer_ = false;
    KvpopPredictor scorer_{nullptr};
    LlamaMirror student_{nullptr};
    int64_t delay_ = 0;
    double scale_ = 1;
    std::unique_ptr<TextStream> stream_;
    bool progress_ = false;
    std::mt19937_64 rng_;
    json dense_nll_;  // the frozen model's held-out NLL with the full cache: computed once
    // The frozen model's digest: what lets kvsieve find this scorer for it (predict/bundled_predictors.h).
    std::string base_digest_;
};

KvpopRun::KvpopRun(const std::string& config_path, bool resume, bool progress)
    : run_(open_frozen_run(config_path, "kvpop", "scorer", "scorer", resume, progress,
                           [this](const json& j) { ko_ = read_kvpop(j); })),
      c_(run_.lm->config()), progress_(progress), rng_(run_.rb.seed ^ 0x51CE) {
    tunes_lm_ = ko_.mode != "scorer";
    has_scorer_ = ko_.mode != "streaming_plus";
    check_lengths();
    torch::manual_seed(run_.rb.seed ^ 0x7A11);
    KvpopScorerShape shape;
    shape.kind = ko_.kind;
    shape.hidden = ko_.hidden, shape.feature = ko_.feature, shape.value = ko_.value;
    shape.softcap = ko_.softcap, shape.forget_bias = ko_.forget_bias;
    if (has_scorer_) scorer_ = KvpopPredictor(c_, shape);
    // The model being fine-tuned starts as a copy of the frozen teacher.
    if (tunes_lm_) student_ = load_mirror(run_.rc.resolve(run_.rc.root["init"].get<std::string>()));
    delay_ = ko_.kind == "mlstm" && ko_.delayed ? ko_.window : 0;
    scale_ = 1.0 / std::sqrt(static_cast<double>(c_.head_dim));
    std::filesystem::create_directories(run_.rb.out);
    stream_ = std::make_unique<TextStream>(run_.data.texts, *run_.tok, run_.data.holdout);
    write_heldout_texts(run_.rb.out, run_.data, *stream_);
    announce();
    base_digest_ = model_digest(GGUFFile(run_.rc.resolve(run_.rc.root["init"].get<std::string>())));
}

void KvpopRun::check_lengths() const {
    const int64_t B = ko_.sinks + ko_.window + ko_.budget;
    for (int64_t L : run_.data.mix.lengths)
        require(L > B, "data.lengths holds ", L, ": no eviction happens within s + w + k = ", B,
                " tokens, so there is nothing to learn");
    require(run_.eval.window > B, "eval.window = ", run_.eval.window, " must exceed s + w + k = ", B);
    require(!tunes_lm_ || ko_.kl_top <= c_.n_vocab, "kvpop.kl_top = ", ko_.kl_top, " exceeds the vocabulary (",
            c_.n_vocab, ")");
}

void KvpopRun::announce() const {
    if (!progress_) return;
    const std::string what =
        has_scorer_ ? "scorer " + ko_.kind + (ko_.kind == "mlstm" ? (ko_.delayed ? " (delayed)" : " (immediate)") : "")
                    : "StreamingLLM mask";
    std::fprintf(stderr, "KVpop (%s): model %s; %s; s %lld, w %lld, k %lld (B = %lld); %lld training text tokens\n",
                 ko_.mode.c_str(), c_.summary().c_str(), what.c_str(), static_cast<long long>(ko_.sinks),
                 static_cast<long long>(ko_.window), static_cast<long long>(ko_.budget),
                 static_cast<long long>(ko_.sinks + ko_.window + ko_.budget),
                 static_cast<long long>(stream_->train_tokens()));
}

std::vector<ParamGroup> KvpopRun::param_groups() const {
    const OptimConfig& oc = run_.rb.optim;
    std::vector<ParamGroup> groups;
    if (has_scorer_) groups.push_back(ParamGroup{"kvpop_scorer", scorer_->parameters(), oc.lr, oc.weight_decay});
    if (tunes_lm_) {
        ParamGroup g{"model", student_->parameters(), ko_.base_lr, oc.weight_decay};
        g.schedule = Schedule{"constant", 0, run_.loop.steps};
        groups.push_back(std::move(g));
    }
    return groups;
}

torch::Tensor KvpopRun::evictions(int l, const torch::Tensor& k, const torch::Tensor& v) {
    torch::NoGradGuard ng;
    const int64_t B = k.size(0), H = k.size(1), T = k.size(2);
    std::vector<int64_t> all;
    all.reserve(static_cast<size_t>(B * H * T));
    if (!has_scorer_) {
        const auto e = streaming_eviction_steps(T, ko_.sinks, ko_.window, ko_.budget);
        for (int64_t bh = 0; bh < B * H; ++bh) all.insert(all.end(), e.begin(), e.end());
    } else {
        const auto r = scorer_->scores(l, k, v, delay_).contiguous();
        const auto lg = scorer_->log_gamma(l).contiguous();
        const float* rp = r.data_ptr<float>();
        const float* gp = lg.data_ptr<float>();
        for (int64_t bh = 0; bh < B * H; ++bh) {
            const auto p = student_priorities(rp + bh * T, T, gp[bh % H], ko_.decay_every);
            const auto e = eviction_steps(boundary_pairs(p, ko_.sinks, ko_.window, ko_.budget), T);
            all.insert(all.end(), e.begin(), e.end());
        }
    }
    return torch::tensor(all, torch::kInt64).view({B, H, T});
}

MirrorHooks KvpopRun::masked(std::vector<std::pair<torch::Tensor, torch::Tensor>>* kv_out) {
    MirrorHooks h;
    h.key_until = [this, kv_out](int l, const AttnTensors& a) {
        const auto k = a.k_post.detach(), v = a.v.detach();
        if (kv_out) kv_out->emplace_back(k, v);
        return evictions(l, k, v);
    };
    return h;
}

Pass KvpopRun::make_pass(const torch::Tensor& toks, bool grad) {
    Pass p;
    std::vector<AttnTensors> cap;
    if (!tunes_lm_) {
        torch::NoGradGuard ng;
        MirrorHooks h = ko_.target == "sparse" ? masked(&p.kv) : MirrorHooks{};
        h.capture = &cap;
        run_.lm->forward(toks, h);
        p.target = detached(std::move(cap));
        if (ko_.target == "dense")
            for (const auto& a : p.target) p.kv.emplace_back(a.k_post, a.v);
        return p;
    }
    {
        torch::NoGradGuard ng;
        MirrorHooks th;
        if (has_scorer_ && ko_.target == "dense") th.capture = &cap;
        p.teacher = topk_teacher(run_.lm->forward(toks, th), ko_.kl_top);
        p.target = detached(std::move(cap));
    }
    std::vector<AttnTensors> scap;
    MirrorHooks sh = masked(has_scorer_ ? &p.kv : nullptr);
    if (has_scorer_ && ko_.target == "sparse") sh.capture = &scap;
    {
        torch::AutoGradMode ag(grad);
        p.student_logits = student_->forward(toks, sh);
    }
    if (!scap.empty()) p.target = detached(std::move(scap));
    return p;
}

MicroResult KvpopRun::micro(int64_t step, int64_t m) {
    const LoopOptions& lo = run_.loop;
    const auto t0 = std::chrono::steady_clock::now();
    const Batch b =
        make_batch(run_.data.mix, *stream_, *run_.tok, run_.data.haystack, run_.rb.seed, step * lo.grad_accum + m);
    const double data_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto toks = torch::from_blob(const_cast<int64_t*>(b.tokens.data()), {b.B, b.T}, torch::kInt64);
    Pass pass = make_pass(toks, true);
    MicroResult res;
    double kl = 0;
    if (tunes_lm_) {
        const auto l = topk_kl(pass.student_logits, pass.teacher);
        (l / static_cast<double>(lo.grad_accum)).backward();
        kl = l.item<double>();
        pass.student_logits = torch::Tensor();
        res.metrics["kl"] = kl;
    }
    double loss_sum = 0;
    int64_t n = 0, agree = 0, keep = 0;
    // The pair loss's weight: 1 when it is the only loss, boundary_weight beside the KL.
    const double bw = tunes_lm_ ? ko_.boundary_weight : 1.0;
    for (int l = 0; has_scorer_ && l < c_.n_layer; ++l) {
        const LayerTeacher lt = teach(pass.target[l], ko_, scale_);
        std::vector<std::vector<BoundaryPair>> chosen(lt.pairs.size());
        for (size_t bh = 0; bh < lt.pairs.size(); ++bh) {
            chosen[bh] = lt.pairs[bh];
            if (ko_.queries > 0 && static_cast<int64_t>(chosen[bh].size()) > ko_.queries) {
                std::shuffle(chosen[bh].begin(), chosen[bh].end(), rng_);
                chosen[bh].resize(ko_.queries);
            }
            for (const auto& p : chosen[bh]) keep += p.keep;
        }
        const auto r = scorer_->scores(l, pass.kv[l].first, pass.kv[l].second, delay_);
        const PairLoss pl = pair_loss(r, scorer_->log_gamma(l), chosen, ko_);
        (pl.loss * (bw / static_cast<double>(c_.n_layer * lo.grad_accum))).backward();
        loss_sum += pl.loss.item<double>();
        n += pl.n;
        agree += pl.agree;
    }
    if (has_scorer_) {
        res.metrics["pair_loss"] = loss_sum / c_.n_layer;
        res.metrics["pair_acc"] = n ? static_cast<double>(agree) / n : 0.0;
        res.metrics["keep_frac"] = n ? static_cast<double>(keep) / n : 0.0;
    }
    res.loss = torch::tensor(kl + bw * loss_sum / c_.n_layer);
    res.backward_done = true;
    res.tokens = b.B * b.T;
    res.data_seconds = data_s;
    return res;
}

json KvpopRun::eval() {
    json e = json::object();
    torch::NoGradGuard ng;
    const LmEvalSpec& ev = run_.eval;
    if (tunes_lm_) {
        // Held-out NLL: the frozen model with the full cache and under the mask, and the fine-tuned model under it.
        const auto names = run_.data.names();
        if (dense_nll_.empty()) dense_nll_ = heldout_nll(run_.lm, *stream_, names, ev.window, ev.text_windows);
        const json base = heldout_nll(run_.lm, *stream_, names, ev.window, ev.text_windows, masked(nullptr));
        const json tuned = heldout_nll(student_, *stream_, names, ev.window, ev.text_windows, masked(nullptr));
        for (const auto& [prefix, nll] :
             {std::pair<const char*, const json*>{"dense_", &dense_nll_}, {"base_masked_", &base}, {"masked_", &tuned}})
            for (auto it = nll->begin(); it != nll->end(); ++it) e[prefix + it.key()] = it.value();
    }
    if (has_scorer_) eval_scorer(e);
    return e;
}

void KvpopRun::eval_scorer(json& e) {
    const LmEvalSpec& ev = run_.eval;
    double loss = 0;
    int64_t n = 0, agree = 0, windows = 0;
    std::vector<std::vector<double>> rec(c_.n_layer, std::vector<double>(c_.n_head_kv, 0.0)), recent = rec;
    for (size_t f = 0; f < stream_->files(); ++f)
        for (const auto& seq : stream_->heldout_windows(f, ev.window, ev.text_windows)) {
            auto t = torch::tensor(std::vector<int64_t>(seq.tokens.begin(), seq.tokens.end())).unsqueeze(0);
            const Pass pass = make_pass(t, false);
            for (int l = 0; l < c_.n_layer; ++l) {
                const LayerTeacher lt = teach(pass.target[l], ko_, scale_);
                const auto r = scorer_->scores(l, pass.kv[l].first, pass.kv[l].second, delay_).contiguous();
                const PairLoss pl = pair_loss(r, scorer_->log_gamma(l), lt.pairs, ko_);
                loss += pl.loss.item<double>() * pl.n;
                n += pl.n;
                agree += pl.agree;
                const auto lg = scorer_->log_gamma(l).contiguous();
                const int64_t T = r.size(2);
                const float* rp = r.data_ptr<float>();
                for (int h = 0; h < c_.n_head_kv; ++h) {
                    const auto sp = student_priorities(rp + h * T, T, lg[h].item<float>(), ko_.decay_every);
                    const auto [a, b] = recall_at_end(lt.prio[h], sp, ko_);
                    rec[l][h] += a;
                    recent[l][h] += b;
                }
            }
            ++windows;
        }
    if (n) {
        e["pair_loss"] = loss / n;
        e["pair_acc"] = static_cast<double>(agree) / n;
    }
    if (!windows) return;
    double ra = 0, rb = 0;
    for (auto* m : {&rec, &recent})
        for (auto& row : *m)
            for (auto& x : row) x /= windows;
    for (int l = 0; l < c_.n_layer; ++l)
        for (int h = 0; h < c_.n_head_kv; ++h) ra += rec[l][h], rb += recent[l][h];
    e["recall"] = ra / (c_.n_layer * c_.n_head_kv);
    e["recall_recent"] = rb / (c_.n_layer * c_.n_head_kv);
    e["recall_heads"] = rec;
    e["recall_recent_heads"] = recent;
}

void KvpopRun::save_to(const std::string& dir) {
    const json& cfg = run_.rc.root;
    const std::string init = run_.rc.resolve(cfg["init"].get<std::string>());
    std::filesystem::create_directories(dir);
    json card = {{"model_type", has_scorer_ ? "kvpop" : "streaming_plus"},
                 {"mode", ko_.mode},
                 {"base_model", init},
                 {"model_digest", base_digest_},
                 {"n_layer", c_.n_layer},
                 {"n_head_kv", c_.n_head_kv},
                 {"head_dim", c_.head_dim},
                 {"window", ko_.window},
                 {"sinks", ko_.sinks},
                 {"budget_k", ko_.budget}};
    if (has_scorer_) {
        scorer_->save_safetensors((std::filesystem::path(dir) / "model.safetensors").string());
        card.update({{"kind", ko_.kind},
                     {"delayed", ko_.delayed},
                     {"decay_every", ko_.decay_every},
                     {"softcap", ko_.softcap},
                     {"teacher_gamma", ko_.teacher_gamma},
                     {"target", ko_.target},
                     {"hidden", scorer_->shape().hidden},
                     {"feature", scorer_->shape().feature},
                     {"value", scorer_->shape().value}});
    }
    if (tunes_lm_) {
        GGUFMetadata meta = tokenizer_metadata(init);
        meta.insert(meta.begin(),
                    {"general.name", GGUFValue::make_string(cfg.value("name", "kvsieve-kvpop-" + ko_.mode))});
        save_mirror(student_, (std::filesystem::path(dir) / "model.gguf").string(), meta);
        card["model_gguf"] = "model.gguf";
        card["kl_top"] = ko_.kl_top;
        card["base_lr"] = ko_.base_lr;
    }
    write_text((std::filesystem::path(dir) / "config.json").string(), card.dump(2) + "\n");
}

bool KvpopRun::run() {
    // The checkpoint holds the scorer alone in scorer mode (as before the fine-tuning modes existed, so such runs
    // resume), the model and its scorer otherwise.
    KvpopRunModule holder(scorer_, student_);
    TrainLoop loop(tunes_lm_ ? static_cast<torch::nn::Module&>(holder) : *scorer_, param_groups(), run_.loop);
    return loop.run_and_export(
        [this](int64_t step, int64_t m) { return micro(step, m); }, [this](int64_t) { return eval(); },
        [this](const std::string& dir, bool) { save_to(dir); }, run_.rb.out + "/scorer", run_.output);
}

}  // namespace

bool run_kvpop(const std::string& config_path, bool resume, bool progress) {
    KvpopRun run(config_path, resume, progress);
    return run.run();
}

}  // namespace kvsieve::train
