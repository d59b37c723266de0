#include "train/attn_supervision.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "util/error.h"

namespace kvsieve::train {

namespace {

int32_t piece_id(const Tokenizer& tok, const std::string& text) {
    for (const std::string& p : {"\xE2\x96\x81" + text, "\xC4\xA0" + text}) {  // "▁" and "Ġ" spellings
        if (const int32_t id = tok.vocab().find(p); id >= 0) return id;
    }
    fail("the vocabulary has no single token for \" ", text, "\" (needed to find variable statements)");
}

int32_t plain_id(const Tokenizer& tok, const std::string& text) {
    const int32_t id = tok.vocab().find(text);
    require(id >= 0, "the vocabulary has no single token for \"", text, "\" (needed to find variable statements)");
    return id;
}

}  // namespace

ChainTokenIds chain_token_ids(const Tokenizer& tok) {
    ChainTokenIds ids;
    ids.var = piece_id(tok, "VAR");
    ids.eq = piece_id(tok, "=");
    ids.dot = plain_id(tok, ".");
    ids.comma = plain_id(tok, ",");
    ids.colon = plain_id(tok, ":");
    // The newline token (a byte-fallback "<0x0A>" or a plain "\n" piece) and what follows it in "\nVAR".
    ids.newline = tok.vocab().find("<0x0A>") >= 0 ? tok.vocab().find("<0x0A>") : tok.vocab().find("\n");
    const std::vector<int32_t> line = tok.encode("\nVAR", false);
    const auto nl = std::find(line.begin(), line.end(), ids.newline);
    if (ids.newline >= 0 && nl != line.end()) ids.var_line_start.assign(nl + 1, line.end());
    return ids;
}

ChainTargets chain_targets(const std::vector<int64_t>& tokens, int64_t B, int64_t T, const ChainTokenIds& ids) {
    require(static_cast<int64_t>(tokens.size()) == B * T, "chain_targets: ", tokens.size(), " tokens for [", B, ", ", T,
            "]");
    constexpr int64_t kMaxName = 16;  // tokens; longer runs are not names
    ChainTargets out;
    for (int64_t b = 0; b < B; ++b) {
        const int64_t* t = tokens.data() + b * T;
        auto is_marker = [&](int64_t x) {
            return x == ids.var || x == ids.eq || x == ids.dot || x == ids.comma || x == ids.colon;
        };
        // Length of the "VAR" that opens a statement at i (" VAR", or "VAR" after a newline), 0 if none.
        const int64_t nls = static_cast<int64_t>(ids.var_line_start.size());
        auto var_at = [&](int64_t i) -> int64_t {
            if (t[i] == ids.var) return 1;
            if (nls == 0 || i == 0 || t[i - 1] != ids.newline || i + nls > T) return 0;
            for (int64_t j = 0; j < nls; ++j)
                if (t[i + j] != ids.var_line_start[static_cast<size_t>(j)]) return 0;
            return nls;
        };
        // Tokens from i up to the first `stop`, if that is a name (1..kMaxName tokens, no marker in it): end index.
        auto name_end = [&](int64_t i, int64_t stop) -> int64_t {
            for (int64_t j = i; j < T && j - i <= kMaxName; ++j) {
                if (t[j] == stop) return j > i ? j : -1;
                if (is_marker(t[j])) return -1;
            }
            return -1;
        };
        std::map<std::vector<int64_t>, int64_t> dot_of;  // left-hand name → closing "." of its latest statement
        for (int64_t i = 0; i < T; ++i) {
            if (const int64_t vl = var_at(i); vl > 0) {
                i += vl - 1;  // the last token of "VAR"
                const int64_t eq = name_end(i + 1, ids.eq);
                if (eq < 0 || eq + 1 >= T) continue;
                int64_t dot = -1;
                if (t[eq + 1] == ids.var) {
                    dot = name_end(eq + 2, ids.dot);
                } else {  // a value: any non-marker tokens up to "."
                    dot = name_end(eq + 1, ids.dot);
                }
                if (dot < 0) continue;
                out.carry.push_back({b, dot, i + 1});
                dot_of[std::vector<int64_t>(t + i + 1, t + eq)] = dot;
                i = dot;
            } else if (t[i] == ids.colon) {
                int64_t p = i + 1;
                while (p < T) {
                    int64_t end = -1;
                    for (int64_t j = p; j < T && j - p <= kMaxName; ++j) {
                        if (t[j] == ids.comma || t[j] == ids.dot) {
                            end = j;
                            break;
                        }
                        if (is_marker(t[j])) break;
                    }
                    if (end <= p) break;
                    auto it = dot_of.find(std::vector<int64_t>(t + p, t + end));
                    if (it != dot_of.end() && it->second < p - 1) out.lookup.push_back({b, p - 1, it->second});
                    if (t[end] == ids.dot) break;
                    p = end + 1;
                }
            }
        }
    }
    return out;
}

AttnTargetLoss attention_target_loss(const std::vector<AttnTensors>& cap, int layer, int head,
                                     const std::vector<AttnTarget>& edges) {
    require(layer >= 0 && layer < static_cast<int>(cap.size()), "attention supervision: layer ", layer,
            " is out of range (the model has ", cap.size(), " layers)");
    const AttnTensors& a = cap[static_cast<size_t>(layer)];
    require(a.q_post.defined() && a.lse.defined(), "attention supervision needs a capture with queries and lse");
    const int64_t hq = a.q_post.size(1), hkv = a.k_post.size(1), d = a.q_post.size(3), T = a.q_post.size(2);
    require(head >= 0 && head < hq, "attention supervision: head ", head, " is out of range (", hq, " query heads)");
    AttnTargetLoss r;
    r.edges = static_cast<int64_t>(edges.size());
    if (edges.empty()) {
        r.loss = torch::zeros({}, a.q_post.options());
        return r;
    }
    std::vector<int64_t> rows, qs, ks;
    for (const auto& e : edges) {
        require(e.key <= e.query && e.query < T && e.key >= 0, "attention supervision: edge (query ", e.query, ", key ",
                e.key, ") is not causal or is outside ", T, " tokens");
        rows.push_back(e.row);
        qs.push_back(e.query);
        ks.push_back(e.key);
    }
    const auto rt = torch::tensor(rows), qt = torch::tensor(qs), kt = torch::tensor(ks);
    const int64_t kvh = head / (hq / hkv);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    auto q = a.q_post.select(1, head).index({rt, qt});  // [E, d]
    auto k = a.k_post.select(1, kvh).index({rt, kt});   // [E, d]
    auto logit = (q * k).sum(-1) * scale;
    require(!a.q_post.requires_grad() || a.lse.requires_grad(),
            "attention target loss: the capture's log-sum-exp carries no gradient (a blocked-attention capture); ",
            "the loss needs the dense attention path");
    auto lse = a.lse.select(1, head).index({rt, qt});
    r.loss = (lse - logit).mean();
    {
        torch::NoGradGuard ng;
        auto all = torch::matmul(a.k_post.select(1, kvh).index({rt}), q.unsqueeze(-1)).squeeze(-1) * scale;  // [E, T]
        auto pos = torch::arange(T).unsqueeze(0);
        all = all.masked_fill(pos > qt.unsqueeze(1), -std::numeric_limits<float>::infinity());
        r.hit_rate = all.argmax(-1).eq(kt).to(torch::kFloat64).mean().item<double>();
    }
    return r;
}

}  // namespace kvsieve::train
