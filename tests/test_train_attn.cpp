// Attention supervision of the chain-following circuit (train/attn_supervision.h): the parser's edges on real
// variable-tracking rows, and the loss against a full softmax recomputed here.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "eval/tasks.h"
#include "io/gguf.h"
#include "text/tokenizer.h"
#include "train/attn_supervision.h"
#include "train/mirror.h"
#include "util/error.h"

namespace kvsieve {
namespace {

std::unique_ptr<Tokenizer> tiny2k_tokenizer() {
    GGUFFile f(std::string(KVSIEVE_TEST_DATA) + "/models/kvsieve-tiny-2k.gguf");
    return Tokenizer::from_gguf(f);
}

std::string spell(const Tokenizer& tok, const std::vector<int64_t>& t, int64_t from, int64_t to) {
    std::vector<int32_t> ids(t.begin() + from, t.begin() + to);
    return tok.decode(ids);
}

TEST(AttnSupervision, ChainTargetsFindEveryStatementAndTheStatementOfEachAnswer) {
    const auto tok = tiny2k_tokenizer();
    const train::ChainTokenIds ids = train::chain_token_ids(*tok);
    ASSERT_FALSE(ids.var_line_start.empty());
    for (const char* task : {"vt", "vt_2"}) {
        for (uint64_t seed : {3u, 4u, 5u}) {  // vt seed 5 opens the text with a statement ("VAR" after "\n")
            const TaskExample ex = make_task_example(task, 512, *tok, "", seed);
            std::string answer = " ";
            for (size_t i = 0; i < ex.answers.size(); ++i) answer += (i ? ", " : "") + ex.answers[i];
            const std::vector<int32_t> ids32 = tok->encode(ex.input + answer + ".", true);
            const std::vector<int64_t> t(ids32.begin(), ids32.end());
            const int64_t T = static_cast<int64_t>(t.size());
            // Two rows: the example, then the same tokens again, so edges carry their row.
            std::vector<int64_t> both = t;
            both.insert(both.end(), t.begin(), t.end());
            const train::ChainTargets tg = train::chain_targets(both, 2, T, ids);

            // Statements counted in the text: every "VAR " that is not a right-hand "= VAR ".
            size_t vars = 0, rhs = 0;
            for (size_t p = ex.input.find("VAR "); p != std::string::npos; p = ex.input.find("VAR ", p + 1)) ++vars;
            for (size_t p = ex.input.find("= VAR "); p != std::string::npos; p = ex.input.find("= VAR ", p + 1)) ++rhs;
            const size_t statements = vars - rhs;
            ASSERT_EQ(tg.carry.size(), 2 * statements) << task << " seed " << seed;
            const std::regex stmt(R"(^ ?([A-Z]{5}) = (VAR [A-Z]{5}|[0-9]+)\.$)");
            for (const auto& e : tg.carry) {
                EXPECT_EQ(t[static_cast<size_t>(e.query)], ids.dot);
                const int64_t var = t[static_cast<size_t>(e.key) - 1];  // " VAR", or "VAR" opening a line
                EXPECT_TRUE(var == ids.var || var == ids.var_line_start.back()) << var;
                const std::string s = spell(*tok, t, e.key, e.query + 1);
                EXPECT_TRUE(std::regex_match(s, stmt)) << "'" << s << "'";
            }
            // One lookup per answer, in order: from ":" or "," to the "." of the statement assigning that name.
            ASSERT_EQ(tg.lookup.size(), 2 * ex.answers.size()) << task << " seed " << seed;
            for (size_t k = 0; k < tg.lookup.size(); ++k) {
                const auto& e = tg.lookup[k];
                EXPECT_EQ(e.row, static_cast<int64_t>(k / ex.answers.size()));
                const std::string& name = ex.answers[k % ex.answers.size()];
                EXPECT_EQ(t[static_cast<size_t>(e.query)], k % ex.answers.size() == 0 ? ids.colon : ids.comma);
                EXPECT_EQ(spell(*tok, t, e.query + 1, std::min(T, e.query + 8)).rfind(" " + name, 0), 0u);
                // Walk back from the key's "." to the statement's "VAR" and read its left-hand name.
                int64_t v = e.key;
                // "VAR" opening a statement: " VAR" not after "=", or the whole line-start spelling after a newline.
                const auto& ls = ids.var_line_start;
                const int64_t nls = static_cast<int64_t>(ls.size());
                auto opens = [&](int64_t i) {
                    if (t[static_cast<size_t>(i)] == ids.var) return t[static_cast<size_t>(i) - 1] != ids.eq;
                    if (i < nls) return false;
                    for (int64_t j = 0; j < nls; ++j)
                        if (t[static_cast<size_t>(i - nls + 1 + j)] != ls[static_cast<size_t>(j)]) return false;
                    return t[static_cast<size_t>(i - nls)] == ids.newline;
                };
                while (v > 0 && !opens(v)) --v;
                std::smatch m;
                const std::string s = spell(*tok, t, v + 1, e.key + 1);
                ASSERT_TRUE(std::regex_match(s, m, stmt)) << "'" << s << "'";
                EXPECT_EQ(m[1].str(), name);
            }
        }
    }
    // Text without statements gives no edges; a vocabulary without the markers is an error.
    const std::vector<int32_t> plain = tok->encode("Once upon a time: a cat, a dog.", true);
    const std::vector<int64_t> p64(plain.begin(), plain.end());
    const auto none = train::chain_targets(p64, 1, static_cast<int64_t>(p64.size()), ids);
    EXPECT_TRUE(none.carry.empty() && none.lookup.empty());
    EXPECT_THROW(train::chain_targets(p64, 2, static_cast<int64_t>(p64.size()), ids), Error);
    GGUFFile stories(std::string(KVSIEVE_TEST_DATA) + "/models/stories260K.gguf");
    EXPECT_THROW(train::chain_token_ids(*Tokenizer::from_gguf(stories)), Error);
}

ModelConfig small_config() {
    ModelConfig c;
    c.arch_name = "llama";
    c.n_layer = 3;
    c.n_embd = 32;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim = 8;
    c.n_rot = 8;
    c.n_ff = 64;
    c.n_vocab = 50;
    c.n_ctx_train = 64;
    return c;
}

TEST(AttnSupervision, LossIsTheCrossEntropyOfTheHeadsSoftmax) {
    torch::manual_seed(5);
    train::LlamaMirror m(small_config());
    const int64_t B = 2, T = 12;
    const auto toks = torch::randint(0, 50, {B, T}, torch::kInt64);
    std::vector<train::AttnTensors> cap;
    train::MirrorHooks hooks;
    hooks.capture = &cap;
    (void)m->forward(toks, hooks);
    const std::vector<train::AttnTarget> edges = {{0, 5, 2}, {1, 11, 0}, {1, 7, 7}, {0, 9, 4}};
    const int layer = 1, head = 3;  // query head 3 reads KV head 1
    const train::AttnTargetLoss r = train::attention_target_loss(cap, layer, head, edges);
    ASSERT_EQ(r.edges, 4);

    // The full causal softmax of that head, recomputed from the captured queries and keys.
    const auto q = cap[layer].q_post.select(1, head), k = cap[layer].k_post.select(1, 1);  // [B, T, d]
    auto s = torch::matmul(q, k.transpose(1, 2)) / std::sqrt(8.0);
    s = s.masked_fill(torch::ones({T, T}, torch::kBool).tril().logical_not(), -INFINITY);
    const auto lp = torch::log_softmax(s, -1);
    double want = 0, hits = 0;
    for (const auto& e : edges) {
        want -= lp[e.row][e.query][e.key].item<double>();
        hits += lp[e.row][e.query].argmax().item<int64_t>() == e.key;
    }
    EXPECT_NEAR(r.loss.item<double>(), want / 4, 1e-5);
    EXPECT_DOUBLE_EQ(r.hit_rate, hits / 4);

    // Gradients reach the supervised layer and the ones below it, never the ones above.
    r.loss.backward();
    std::map<std::string, double> g;
    for (const auto& [name, t] : m->gguf_tensors())
        if (t.grad().defined()) g[name] = t.grad().abs().sum().item<double>();
    EXPECT_GT(g["blk.1.attn_q.weight"], 0);
    EXPECT_GT(g["blk.0.attn_v.weight"], 0);
    EXPECT_EQ(g.count("blk.2.attn_q.weight") ? g["blk.2.attn_q.weight"] : 0.0, 0.0);

    // With every other key masked out, the forward attends only to the target: the loss is 0.
    train::MirrorHooks only;
    std::vector<train::AttnTensors> cap2;
    only.capture = &cap2;
    only.keep_mask = [&](int, const train::AttnTensors&) {
        auto keep = torch::zeros({B, 4, T, T}, torch::kBool);
        return keep;  // the forward keeps each query's own key
    };
    (void)m->forward(toks, only);
    EXPECT_NEAR(train::attention_target_loss(cap2, layer, head, {{0, 5, 5}, {1, 9, 9}}).loss.item<double>(), 0.0, 1e-6);

    // No edges: a zero loss; bad layer, head or a non-causal edge: errors.
    EXPECT_EQ(train::attention_target_loss(cap, 0, 0, {}).loss.item<double>(), 0.0);
    EXPECT_THROW(train::attention_target_loss(cap, 3, 0, edges), Error);
    EXPECT_THROW(train::attention_target_loss(cap, 0, 4, edges), Error);
    EXPECT_THROW(train::attention_target_loss(cap, 0, 0, {{0, 2, 5}}), Error);
}

}  // namespace
}  // namespace kvsieve
