#include "eval/nll.h"

#include <algorithm>
#include <cmath>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "session/prefill_plan.h"
#include "session/session.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/progress.h"

namespace kvsieve {

nlohmann::json NllResult::to_json() const {
    return {{"policy", policy},
            {"nll", mean_nll},
            {"ppl", ppl},
            {"density", mean_density},
            {"compression_ratio", mean_compression},
            {"kv_bytes_per_token", mean_kv_bytes_per_token},
            {"kv_bytes_vs_full_f16", mean_kv_bytes_vs_full_f16},
            {"tokens", tokens},
            {"per_sample_nll", nll},
            {"per_sample_density", density},
            {"head_density", head_density}};
}

namespace {
/// −log softmax(logits)[target], in float64.
double token_nll(const float* logits, int n_vocab, int32_t target) {
    double mx = -INFINITY;
    for (int v = 0; v < n_vocab; ++v) mx = std::max(mx, double(logits[v]));
    double sum = 0;
    for (int v = 0; v < n_vocab; ++v) sum += std::exp(double(logits[v]) - mx);
    return std::log(sum) + mx - logits[target];
}
}  // namespace

namespace {
/// One window's NLL: its summed −log p of the scored tokens and their count.
struct WindowNll {
    double sum = 0;
    int64_t n = 0;
};

/// The chunked protocol: the whole window is the prompt, fed in chunks; each chunk's logits score its next tokens.
/// The policy admits and compresses after each chunk (SP-KV App. A.2: what the protocol measures is each chunk
/// reading a past already compressed), the memory-bounded prefill of KVCache::set_compress_during_prefill.
WindowNll chunked_window_nll(const LlamaModel& model, const Tokenizer& tok, KVCache& cache,
                             const std::vector<int32_t>& w, int64_t chunk) {
    const int V = model.config().n_vocab;
    const int64_t W = static_cast<int64_t>(w.size());
    cache.set_compress_during_prefill(true);
    PrefillPlan plan;
    plan.chunk = planned_chunk(cache.policy(), chunk, true, true);  // `chunk`: no policy here is fed in one piece
    plan.all_logits = true;
    Session session(model, tok, cache);
    std::vector<float> logits;
    WindowNll r;
    session.prefill(w, plan, logits, [&](int64_t b, int64_t e, const std::vector<float>& lg) {
        for (int64_t t = b; t < e && t + 1 < W; ++t, ++r.n) r.sum += token_nll(lg.data() + (t - b) * V, V, w[t + 1]);
    });
    return r;
}

/// The plain protocol: a prefix prefilled in one piece, then every later token decoded and scored.
WindowNll plain_window_nll(const LlamaModel& model, const Tokenizer& tok, KVCache& cache, const std::vector<int32_t>& w,
                           int64_t prefix_tokens) {
    const int V = model.config().n_vocab;
    const int64_t W = static_cast<int64_t>(w.size());
    const int64_t prefix = prefix_tokens > 0 ? std::min(prefix_tokens, W - 1) : W / 2;
    Session session(model, tok, cache);
    std::vector<float> logits;
    session.prefill(std::vector<int32_t>(w.begin(), w.begin() + prefix), PrefillPlan{}, logits);
    WindowNll r;
    for (int64_t t = prefix; t < W; ++t, ++r.n) {
        r.sum += token_nll(logits.data(), V, w[t]);
        if (t + 1 < W) session.decode(w[t], logits);
    }
    return r;
}

/// The window's statistics into r (per sample) and its per-head density into the running mean (`samples` windows).
void add_window_stats(const KVStats& st, int64_t samples, NllResult& r) {
    r.density.push_back(st.density);
    r.compression.push_back(st.compression_ratio);
    r.kv_bytes_per_token.push_back(static_cast<double>(st.kv_bytes_final) / static_cast<double>(st.tokens));
    r.kv_bytes_vs_full_f16.push_back(static_cast<double>(st.kv_bytes_final) /
                                     static_cast<double>(std::max<uint64_t>(st.kv_bytes_full, 1)));
    const auto hd = st.head_density();
    if (r.head_density.empty())
        r.head_density.assign(hd.size(), std::vector<double>(hd.empty() ? 0 : hd[0].size(), 0.0));
    for (size_t l = 0; l < hd.size(); ++l)
        for (size_t h = 0; h < hd[l].size(); ++h) r.head_density[l][h] += hd[l][h] / samples;
}
}  // namespace

NllResult evaluate_nll(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus_text,
                       const std::string& policy_spec, const NllOptions& o) {
    const ModelConfig& c = model.config();
    require(!corpus_text.empty(), "the corpus is empty");
    require(o.sample_tokens >= 4, "the NLL window must be at least 4 tokens, got ", o.sample_tokens);
    require(o.sample_tokens <= c.n_ctx_train, "the NLL window of ", o.sample_tokens,
            " tokens is longer than the model's context of ", c.n_ctx_train);
    require(o.samples >= 1, "--samples must be ≥ 1");
    require(o.chunk >= 1, "the chunk size must be ≥ 1");
    const std::vector<int32_t> ids = tok.encode(corpus_text, false, false);
    const int64_t per = o.sample_tokens - 1;  // BOS + per corpus tokens
    require(static_cast<int64_t>(ids.size()) >= per, "the corpus has ", ids.size(),
            " tokens, fewer than one window of ", per);
    const int64_t samples = std::min<int64_t>(o.samples, static_cast<int64_t>(ids.size()) / per);

    Policy p = parse_policy(policy_spec);
    require(o.protocol == NllProtocol::kPlain || !p.after_prefill, "policy ", p.name,
            " scores a whole prompt after its prefill: use --protocol plain");
    if (o.protocol == NllProtocol::kChunked && p.window == 0 && !p.is_full()) {
        p.sinks = std::max(p.sinks, o.sinks);
        p.window = o.window;
    }
    auto pool = make_kv_pool(c.head_dim, parse_kv_types(o.kv_type), parse_kv_rotate_mode(o.kv_rotate));
    NllResult r;
    r.policy = policy_spec;
    Progress bar("nll " + policy_spec, samples, o.progress);
    double total = 0;
    for (int64_t s = 0; s < samples; ++s) {
        std::vector<int32_t> w{tok.vocab().bos >= 0 ? tok.vocab().bos : ids[0]};
        w.insert(w.end(), ids.begin() + s * per, ids.begin() + (s + 1) * per);
        KVCache cache(c, 2 * static_cast<int64_t>(w.size()) + 64, p, pool);  // room for KVzip's replay
        const WindowNll wn = o.protocol == NllProtocol::kChunked ? chunked_window_nll(model, tok, cache, w, o.chunk)
                                                                 : plain_window_nll(model, tok, cache, w, o.prefix);
        r.nll.push_back(wn.sum / wn.n);
        add_window_stats(cache.stats(), samples, r);
        r.tokens += wn.n;
        total += wn.sum;
        char extra[64];
        std::snprintf(extra, sizeof extra, "nll %.4f", total / r.tokens);
        bar.update(s + 1, extra);
    }
    bar.finish();
    r.mean_nll = total / r.tokens;
    r.ppl = std::exp(r.mean_nll);
    for (size_t i = 0; i < r.nll.size(); ++i) {
        r.mean_density += r.density[i] / r.nll.size();
        r.mean_compression += r.compression[i] / r.nll.size();
        r.mean_kv_bytes_per_token += r.kv_bytes_per_token[i] / r.nll.size();
        r.mean_kv_bytes_vs_full_f16 += r.kv_bytes_vs_full_f16[i] / r.nll.size();
    }
    return r;
}

}  // namespace kvsieve
