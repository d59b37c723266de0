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

bool run_kvpop(const std::string& config_path, bool resume, bool progress) {
    KvpopOptions ko;
    FrozenModelRun run = open_frozen_run(config_path, "kvpop", "scorer", "scorer", resume, progress,
                                         [&](const json& j) { ko = read_kvpop(j); });
    auto& [rc, rb, output, data, lo, ev, tok, lm] = run;
    const json& cfg = rc.root;
    const std::string& out = rb.out;
    const ModelConfig& c = lm->config();
    const bool tunes_lm = ko.mode != "scorer", has_scorer = ko.mode != "streaming_plus";
    for (int64_t L : data.mix.lengths) {
        require(L > ko.sinks + ko.window + ko.budget, "data.lengths holds ", L,
                ": no eviction happens within s + w + k = ", ko.sinks + ko.window + ko.budget,
                " tokens, so there is nothing to learn");
    }
    require(ev.window > ko.sinks + ko.window + ko.budget, "eval.window = ", ev.window,
            " must exceed s + w + k = ", ko.sinks + ko.window + ko.budget);
    require(!tunes_lm || ko.kl_top <= c.n_vocab, "kvpop.kl_top = ", ko.kl_top, " exceeds the vocabulary (", c.n_vocab,
            ")");
    torch::manual_seed(rb.seed ^ 0x7A11);
    KvpopScorerShape shape;
    shape.kind = ko.kind;
    shape.hidden = ko.hidden, shape.feature = ko.feature, shape.value = ko.value;
    shape.softcap = ko.softcap, shape.forget_bias = ko.forget_bias;
    KvpopPredictor scorer = has_scorer ? KvpopPredictor(c, shape) : KvpopPredictor(nullptr);
    // The model being fine-tuned starts as a copy of the frozen teacher.
    LlamaMirror student = tunes_lm ? load_mirror(rc.resolve(cfg["init"].get<std::string>())) : LlamaMirror(nullptr);
    const int64_t delay = ko.kind == "mlstm" && ko.delayed ? ko.window : 0;
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));

    std::filesystem::create_directories(out);
    const TextStream stream(data.texts, *tok, data.holdout);
    write_heldout_texts(out, data, stream);
    if (progress)
        std::fprintf(
            stderr, "KVpop (%s): model %s; %s; s %lld, w %lld, k %lld (B = %lld); %lld training text tokens\n",
            ko.mode.c_str(), c.summary().c_str(),
            has_scorer
                ? ("scorer " + ko.kind + (ko.kind == "mlstm" ? (ko.delayed ? " (delayed)" : " (immediate)") : ""))
                      .c_str()
                : "StreamingLLM mask",
            static_cast<long long>(ko.sinks), static_cast<long long>(ko.window), static_cast<long long>(ko.budget),
            static_cast<long long>(ko.sinks + ko.window + ko.budget), static_cast<long long>(stream.train_tokens()));

    const OptimConfig& oc = rb.optim;
    std::vector<ParamGroup> groups;
    if (has_scorer) groups.push_back(ParamGroup{"kvpop_scorer", scorer->parameters(), oc.lr, oc.weight_decay});
    if (tunes_lm) {
        ParamGroup g{"model", student->parameters(), ko.base_lr, oc.weight_decay};
        g.schedule = Schedule{"constant", 0, lo.steps};
        groups.push_back(std::move(g));
    }
    // The checkpoint holds the scorer alone in scorer mode (as before the fine-tuning modes existed, so such runs
    // resume), the model and its scorer otherwise.
    KvpopRunModule holder(scorer, student);
    TrainLoop loop(tunes_lm ? static_cast<torch::nn::Module&>(holder) : *scorer, groups, lo);

    // Eviction steps [B, Hkv, T] of one layer for keys and values k, v [B, Hkv, T, d]: the running top-k of the
    // scorer's static priorities r − ⌊t/n⌋ log γ_h, or StreamingLLM's at the same budget.
    auto evictions = [&](int l, const torch::Tensor& k, const torch::Tensor& v) {
        torch::NoGradGuard ng;
        const int64_t B = k.size(0), H = k.size(1), T = k.size(2);
        std::vector<int64_t> all;
        all.reserve(static_cast<size_t>(B * H * T));
        if (!has_scorer) {
            const auto e = streaming_eviction_steps(T, ko.sinks, ko.window, ko.budget);
            for (int64_t bh = 0; bh < B * H; ++bh) all.insert(all.end(), e.begin(), e.end());
        } else {
            const auto r = scorer->scores(l, k, v, delay).contiguous();
            const auto lg = scorer->log_gamma(l).contiguous();
            const float* rp = r.data_ptr<float>();
            const float* gp = lg.data_ptr<float>();
            for (int64_t bh = 0; bh < B * H; ++bh) {
                const auto p = student_priorities(rp + bh * T, T, gp[bh % H], ko.decay_every);
                const auto e = eviction_steps(boundary_pairs(p, ko.sinks, ko.window, ko.budget), T);
                all.insert(all.end(), e.begin(), e.end());
            }
        }
        return torch::tensor(all, torch::kInt64).view({B, H, T});
    };
    // Hooks that run a forward under the eviction mask; kv_out (if set) receives each layer's keys and values.
    auto masked = [&](std::vector<std::pair<torch::Tensor, torch::Tensor>>* kv_out) {
        MirrorHooks h;
        h.key_until = [&evictions, kv_out](int l, const AttnTensors& a) {
            const auto k = a.k_post.detach(), v = a.v.detach();
            if (kv_out) kv_out->emplace_back(k, v);
            return evictions(l, k, v);
        };
        return h;
    };
    // Every forward a step (training) or an evaluation (no gradient) needs.
    auto make_pass = [&](const torch::Tensor& toks, bool grad) {
        Pass p;
        std::vector<AttnTensors> cap;
        if (!tunes_lm) {
            torch::NoGradGuard ng;
            MirrorHooks h = ko.target == "sparse" ? masked(&p.kv) : MirrorHooks{};
            h.capture = &cap;
            lm->forward(toks, h);
            p.target = detached(std::move(cap));
            if (ko.target == "dense")
                for (const auto& a : p.target) p.kv.emplace_back(a.k_post, a.v);
            return p;
        }
        {
            torch::NoGradGuard ng;
            MirrorHooks th;
            if (has_scorer && ko.target == "dense") th.capture = &cap;
            p.teacher = topk_teacher(lm->forward(toks, th), ko.kl_top);
            p.target = detached(std::move(cap));
        }
        std::vector<AttnTensors> scap;
        MirrorHooks sh = masked(has_scorer ? &p.kv : nullptr);
        if (has_scorer && ko.target == "sparse") sh.capture = &scap;
        {
            torch::AutoGradMode ag(grad);
            p.student_logits = student->forward(toks, sh);
        }
        if (!scap.empty()) p.target = detached(std::move(scap));
        return p;
    };
    std::mt19937_64 rng(rb.seed ^ 0x51CE);

    auto micro = [&](int64_t step, int64_t m) {
        const auto t0 = std::chrono::steady_clock::now();
        const Batch b = make_batch(data.mix, stream, *tok, data.haystack, rb.seed, step * lo.grad_accum + m);
        const double data_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        auto toks = torch::from_blob(const_cast<int64_t*>(b.tokens.data()), {b.B, b.T}, torch::kInt64);
        Pass pass = make_pass(toks, true);
        MicroResult res;
        double kl = 0;
        if (tunes_lm) {
            const auto l = topk_kl(pass.student_logits, pass.teacher);
            (l / static_cast<double>(lo.grad_accum)).backward();
            kl = l.item<double>();
            pass.student_logits = torch::Tensor();
            res.metrics["kl"] = kl;
        }
        double loss_sum = 0;
        int64_t n = 0, agree = 0, keep = 0;
        // The pair loss's weight: 1 when it is the only loss, boundary_weight beside the KL.
        const double bw = tunes_lm ? ko.boundary_weight : 1.0;
        for (int l = 0; has_scorer && l < c.n_layer; ++l) {
            const LayerTeacher lt = teach(pass.target[l], ko, scale);
            std::vector<std::vector<BoundaryPair>> chosen(lt.pairs.size());
            for (size_t bh = 0; bh < lt.pairs.size(); ++bh) {
                chosen[bh] = lt.pairs[bh];
                if (ko.queries > 0 && static_cast<int64_t>(chosen[bh].size()) > ko.queries) {
                    std::shuffle(chosen[bh].begin(), chosen[bh].end(), rng);
                    chosen[bh].resize(ko.queries);
                }
                for (const auto& p : chosen[bh]) keep += p.keep;
            }
            const auto r = scorer->scores(l, pass.kv[l].first, pass.kv[l].second, delay);
            const PairLoss pl = pair_loss(r, scorer->log_gamma(l), chosen, ko);
            (pl.loss * (bw / static_cast<double>(c.n_layer * lo.grad_accum))).backward();
            loss_sum += pl.loss.item<double>();
            n += pl.n;
            agree += pl.agree;
        }
        if (has_scorer) {
            res.metrics["pair_loss"] = loss_sum / c.n_layer;
            res.metrics["pair_acc"] = n ? static_cast<double>(agree) / n : 0.0;
            res.metrics["keep_frac"] = n ? static_cast<double>(keep) / n : 0.0;
        }
        res.loss = torch::tensor(kl + bw * loss_sum / c.n_layer);
        res.backward_done = true;
        res.tokens = b.B * b.T;
        res.data_seconds = data_s;
        return res;
    };
    json dense_nll;  // the frozen model's held-out NLL with the full cache: computed once
    auto eval = [&](int64_t) {
        json e = json::object();
        torch::NoGradGuard ng;
        if (tunes_lm) {
            // Held-out NLL: the frozen model with the full cache and under the mask, and the fine-tuned model under it.
            const auto names = data.names();
            if (dense_nll.empty()) dense_nll = heldout_nll(lm, stream, names, ev.window, ev.text_windows);
            const json base = heldout_nll(lm, stream, names, ev.window, ev.text_windows, masked(nullptr));
            const json tuned = heldout_nll(student, stream, names, ev.window, ev.text_windows, masked(nullptr));
            for (const auto& [prefix, nll] : {std::pair<const char*, const json*>{"dense_", &dense_nll},
                                              {"base_masked_", &base},
                                              {"masked_", &tuned}})
                for (auto it = nll->begin(); it != nll->end(); ++it) e[prefix + it.key()] = it.value();
        }
        if (!has_scorer) return e;
        double loss = 0;
        int64_t n = 0, agree = 0, windows = 0;
        std::vector<std::vector<double>> rec(c.n_layer, std::vector<double>(c.n_head_kv, 0.0)), recent = rec;
        for (size_t f = 0; f < stream.files(); ++f)
            for (const auto& seq : stream.heldout_windows(f, ev.window, ev.text_windows)) {
                auto t = torch::tensor(std::vector<int64_t>(seq.tokens.begin(), seq.tokens.end())).unsqueeze(0);
                const Pass pass = make_pass(t, false);
                for (int l = 0; l < c.n_layer; ++l) {
                    const LayerTeacher lt = teach(pass.target[l], ko, scale);
                    const auto r = scorer->scores(l, pass.kv[l].first, pass.kv[l].second, delay).contiguous();
                    const PairLoss pl = pair_loss(r, scorer->log_gamma(l), lt.pairs, ko);
                    loss += pl.loss.item<double>() * pl.n;
                    n += pl.n;
                    agree += pl.agree;
                    const auto lg = scorer->log_gamma(l).contiguous();
                    const int64_t T = r.size(2);
                    const float* rp = r.data_ptr<float>();
                    for (int h = 0; h < c.n_head_kv; ++h) {
                        const auto sp = student_priorities(rp + h * T, T, lg[h].item<float>(), ko.decay_every);
                        const auto [a, b] = recall_at_end(lt.prio[h], sp, ko);
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
        if (windows) {
            double ra = 0, rb2 = 0;
            for (auto* m : {&rec, &recent})
                for (auto& row : *m)
                    for (auto& x : row) x /= windows;
            for (int l = 0; l < c.n_layer; ++l)
                for (int h = 0; h < c.n_head_kv; ++h) ra += rec[l][h], rb2 += recent[l][h];
            e["recall"] = ra / (c.n_layer * c.n_head_kv);
            e["recall_recent"] = rb2 / (c.n_layer * c.n_head_kv);
            e["recall_heads"] = rec;
            e["recall_recent_heads"] = recent;
        }
        return e;
    };
    GGUFMetadata meta = tokenizer_metadata(rc.resolve(cfg["init"].get<std::string>()));
    meta.insert(meta.begin(), {"general.name", GGUFValue::make_string(cfg.value("name", "kvsieve-kvpop-" + ko.mode))});
    // The frozen model's digest: what lets kvsieve find this scorer for it (predict/bundled_predictors.h).
    const std::string base_digest = model_digest(GGUFFile(rc.resolve(cfg["init"].get<std::string>())));
    auto save_to = [&](const std::string& dir) {
        std::filesystem::create_directories(dir);
        json card = {{"model_type", has_scorer ? "kvpop" : "streaming_plus"},
                     {"mode", ko.mode},
                     {"base_model", rc.resolve(cfg["init"].get<std::string>())},
                     {"model_digest", base_digest},
                     {"n_layer", c.n_layer},
                     {"n_head_kv", c.n_head_kv},
                     {"head_dim", c.head_dim},
                     {"window", ko.window},
                     {"sinks", ko.sinks},
                     {"budget_k", ko.budget}};
        if (has_scorer) {
            scorer->save_safetensors((std::filesystem::path(dir) / "model.safetensors").string());
            card.update({{"kind", ko.kind},
                         {"delayed", ko.delayed},
                         {"decay_every", ko.decay_every},
                         {"softcap", ko.softcap},
                         {"teacher_gamma", ko.teacher_gamma},
                         {"target", ko.target},
                         {"hidden", scorer->shape().hidden},
                         {"feature", scorer->shape().feature},
                         {"value", scorer->shape().value}});
        }
        if (tunes_lm) {
            save_mirror(student, (std::filesystem::path(dir) / "model.gguf").string(), meta);
            card["model_gguf"] = "model.gguf";
            card["kl_top"] = ko.kl_top;
            card["base_lr"] = ko.base_lr;
        }
        write_text((std::filesystem::path(dir) / "config.json").string(), card.dump(2) + "\n");
    };
    return loop.run_and_export(
        micro, eval, [&](const std::string& dir, bool) { save_to(dir); }, out + "/scorer", output);
}

}  // namespace kvsieve::train
