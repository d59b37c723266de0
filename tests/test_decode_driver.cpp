// The decode driver (session/decode_driver.h) on its own: which token is sampled is chosen by one-hot logits under
// greedy sampling, so each test states the pieces it feeds and the text, tokens and finish reason they must give.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "session/decode_driver.h"
#include "session/session.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {
namespace {

const LlamaModel& model() { return test::stories260k(); }
const Tokenizer& tokenizer() {
    static const auto tok = Tokenizer::from_gguf(model().file());
    return *tok;
}
int n_vocab() { return model().config().n_vocab; }
std::shared_ptr<KVPool> full_pool() { return std::make_shared<KVPool>(model().config().head_dim, KVType::kF16); }

/// The lowest id whose piece is exactly `piece` (stories260K has a byte token for every byte).
int32_t id_of(const std::string& piece) {
    for (int32_t id = 0; id < n_vocab(); ++id)
        if (!tokenizer().is_eog(id) && tokenizer().token_to_piece(id) == piece) return id;
    ADD_FAILURE() << "no token has the piece '" << piece << "'";
    return 0;
}

int32_t eog_id() {
    for (int32_t id = 0; id < n_vocab(); ++id)
        if (tokenizer().is_eog(id)) return id;
    ADD_FAILURE() << "the vocabulary has no end-of-generation token";
    return 0;
}

/// Logits under which greedy sampling picks `id`.
std::vector<float> one_hot(int32_t id) {
    std::vector<float> l(static_cast<size_t>(n_vocab()), 0.0f);
    l[static_cast<size_t>(id)] = 1.0f;
    return l;
}

SamplerParams greedy() {
    SamplerParams p;
    p.temp = 0;
    return p;
}

/// Feeds the pieces in order (with room in the context) until the driver finishes; returns every step.
std::vector<DecodeStep> feed(DecodeDriver& d, const std::vector<int32_t>& ids, int64_t positions_left = 100) {
    std::vector<DecodeStep> steps;
    for (int32_t id : ids) {
        const std::vector<float> l = one_hot(id);
        steps.push_back(d.next(l.data(), n_vocab(), positions_left));
        if (steps.back().finish != FinishReason::kNone) break;
    }
    return steps;
}

std::string text_of(const std::vector<DecodeStep>& steps) {
    std::string t;
    for (const auto& s : steps) t += s.text;
    return t;
}

TEST(DecodeDriver, AStopStringSplitAcrossPiecesIsHeldBackAndCut) {
    Sampler sampler(greedy());
    StopRules rules;
    rules.stop_strings = {"END"};
    rules.max_tokens = 20;
    DecodeDriver d(tokenizer(), sampler, rules);
    // "xE" "N" "x" "E" "N" "D" "y": the first "EN" turns out not to be the stop string and is released with the "x"
    // after it; the second is cut with its "D", and "y" is never sampled.
    const std::vector<DecodeStep> steps =
        feed(d, {id_of("x"), id_of("E"), id_of("N"), id_of("x"), id_of("E"), id_of("N"), id_of("D"), id_of("y")});
    ASSERT_EQ(steps.size(), 7u);
    EXPECT_EQ(steps[0].text, "x");
    EXPECT_EQ(steps[1].text, "");  // "E" may start "END"
    EXPECT_EQ(steps[2].text, "");  // "EN" too
    EXPECT_EQ(steps[3].text, "ENx");
    EXPECT_EQ(steps[6].finish, FinishReason::kStopString);
    EXPECT_EQ(text_of(steps), "xENx");
    EXPECT_STREQ(finish_reason_name(d.finish_reason()), "stop");
    EXPECT_EQ(d.generated(), 7);
    EXPECT_EQ(steps[6].piece, "D");
}

TEST(DecodeDriver, AnEndTokenFinishesWithoutTextAndReleasesWhatWasHeld) {
    Sampler sampler(greedy());
    StopRules rules;
    rules.stop_strings = {"ab"};
    rules.max_tokens = 20;
    DecodeDriver d(tokenizer(), sampler, rules);
    // "a" is held (it may start "ab"); the vocabulary's end of generation finishes and releases it.
    const std::vector<DecodeStep> steps = feed(d, {id_of("o"), id_of("a"), eog_id(), id_of("b")});
    ASSERT_EQ(steps.size(), 3u);
    EXPECT_EQ(steps[1].text, "");
    EXPECT_TRUE(steps[2].end_token);
    EXPECT_EQ(steps[2].piece, "");
    EXPECT_EQ(steps[2].text, "a");
    EXPECT_EQ(steps[2].finish, FinishReason::kEndToken);
    EXPECT_EQ(text_of(steps), "oa");
    EXPECT_EQ(d.tokens(), (std::vector<int32_t>{id_of("o"), id_of("a"), eog_id()}));
    // A caller's own end token (a chat template's end of turn) ends the answer the same way.
    Sampler s2(greedy());
    StopRules turn;
    turn.end_tokens = {-1, id_of("z")};
    turn.max_tokens = 20;
    DecodeDriver t(tokenizer(), s2, turn);
    const std::vector<DecodeStep> ts = feed(t, {id_of("q"), id_of("z"), id_of("q")});
    ASSERT_EQ(ts.size(), 2u);
    EXPECT_EQ(ts[1].finish, FinishReason::kEndToken);
    EXPECT_EQ(text_of(ts), "q");
}

TEST(DecodeDriver, MaxTokensAndAFullContextFinishWithLength) {
    Sampler sampler(greedy());
    StopRules rules;
    rules.max_tokens = 3;
    DecodeDriver d(tokenizer(), sampler, rules);
    const std::vector<DecodeStep> steps = feed(d, {id_of("a"), id_of("b"), id_of("c"), id_of("d")});
    ASSERT_EQ(steps.size(), 3u);
    EXPECT_EQ(steps[2].finish, FinishReason::kMaxTokens);
    EXPECT_STREQ(finish_reason_name(steps[2].finish), "length");
    EXPECT_EQ(text_of(steps), "abc");
    const std::vector<float> l = one_hot(id_of("e"));
    try {
        d.next(l.data(), n_vocab(), 100);
        ADD_FAILURE() << "a finished driver sampled again";
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("has finished"), std::string::npos) << e.what(); }
    // No position left for the token to run: it is still sampled and shown, then the answer ends.
    Sampler s2(greedy());
    StopRules many;
    many.max_tokens = 10;
    DecodeDriver full(tokenizer(), s2, many);
    const std::vector<DecodeStep> fs = feed(full, {id_of("a")}, 0);
    ASSERT_EQ(fs.size(), 1u);
    EXPECT_EQ(fs[0].finish, FinishReason::kContextFull);
    EXPECT_EQ(fs[0].text, "a");
    // An end token needs no position: it finishes as an end token even then.
    Sampler s3(greedy());
    DecodeDriver end(tokenizer(), s3, many);
    EXPECT_EQ(feed(end, {eog_id()}, 0)[0].finish, FinishReason::kEndToken);
    // Bad stop rules are one clear error.
    StopRules bad;
    bad.max_tokens = -1;
    EXPECT_THROW(DecodeDriver(tokenizer(), s3, bad), Error);
}

TEST(DecodeDriver, AUtf8CharacterSplitAcrossTokensIsShownWhole) {
    // "é" is the bytes C3 A9, here two byte tokens.
    Sampler sampler(greedy());
    StopRules rules;
    rules.max_tokens = 10;
    DecodeDriver d(tokenizer(), sampler, rules);
    const std::vector<DecodeStep> steps = feed(d, {id_of("\xC3"), id_of("\xA9"), id_of("!"), id_of("\xC3")});
    EXPECT_EQ(steps[0].piece, "\xC3");
    EXPECT_EQ(steps[0].text, "");
    EXPECT_EQ(steps[1].text, "\xC3\xA9");
    EXPECT_EQ(steps[2].text, "!");
    EXPECT_EQ(steps[3].text, "");
    // The answer ends in the middle of a character: what is left becomes U+FFFD.
    EXPECT_EQ(d.finish(FinishReason::kMaxTokens), "\xEF\xBF\xBD");
    EXPECT_EQ(d.finish_reason(), FinishReason::kMaxTokens);
    // A stop string whose first character is split across tokens is still found, and nothing of it is shown.
    Sampler s2(greedy());
    StopRules stop;
    stop.stop_strings = {"\xC3\xA9!"};
    stop.max_tokens = 10;
    DecodeDriver t(tokenizer(), s2, stop);
    const std::vector<DecodeStep> ts = feed(t, {id_of("o"), id_of("\xC3"), id_of("\xA9"), id_of("!"), id_of("o")});
    ASSERT_EQ(ts.size(), 4u);
    EXPECT_EQ(ts[3].finish, FinishReason::kStopString);
    EXPECT_EQ(text_of(ts), "o");
}

/// The greedy answer of up to n tokens after `prompt`, by hand: argmax, stop at an end of generation, each token but
/// the last run (`run_last`: the last too).
std::vector<int32_t> by_hand(const std::vector<int32_t>& prompt, int64_t n, bool run_last, int64_t& n_cached) {
    KVCache cache(model().config(), 256, parse_policy("full"), full_pool());
    Session s(model(), tokenizer(), cache);
    std::vector<float> logits;
    s.prefill(prompt, PrefillPlan{}, logits);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t id = argmax(logits.data(), n_vocab());
        out.push_back(id);
        const bool last = tokenizer().is_eog(id) || i + 1 == n;
        if (!last || run_last) s.decode(id, logits);
        if (last) break;
    }
    n_cached = s.n_tokens();
    return out;
}

TEST(DecodeDriver, DecodeSessionRunsEachTokenAndTheLastAsAsked) {
    const std::vector<int32_t> prompt = test::story_prompt_ids();
    const int64_t n = 20;
    for (RunLast run_last : {RunLast::kNo, RunLast::kYes}) {
        int64_t want_cached = 0;
        const std::vector<int32_t> want = by_hand(prompt, n, run_last == RunLast::kYes, want_cached);
        KVCache cache(model().config(), 256, parse_policy("full"), full_pool());
        Session s(model(), tokenizer(), cache);
        std::vector<float> logits;
        s.prefill(prompt, PrefillPlan{}, logits);
        Sampler sampler(greedy());
        StopRules rules;
        rules.max_tokens = n;
        DecodeDriver d(tokenizer(), sampler, rules);
        std::string text, pieces;
        const DecodeRun r = decode_session(s, d, logits, run_last, [&](const DecodeStep& st) {
            text += st.text;
            pieces += st.piece;
        });
        EXPECT_EQ(d.tokens(), want);
        EXPECT_EQ(s.n_tokens(), want_cached);
        EXPECT_EQ(r.logits_current, run_last == RunLast::kYes);
        EXPECT_FALSE(r.context_full);
        EXPECT_EQ(r.reason, want.size() == static_cast<size_t>(n) ? FinishReason::kMaxTokens : FinishReason::kEndToken);
        EXPECT_EQ(text, pieces);  // stories260K's pieces here are whole characters
    }
    // A context with room for 3 more tokens: three are run, the fourth sampled and the answer cut.
    const int64_t n_ctx = static_cast<int64_t>(prompt.size()) + 3;
    KVCache cache(model().config(), n_ctx, parse_policy("full"), full_pool());
    Session s(model(), tokenizer(), cache);
    std::vector<float> logits;
    s.prefill(prompt, PrefillPlan{}, logits);
    Sampler sampler(greedy());
    StopRules rules;
    rules.max_tokens = 50;
    DecodeDriver d(tokenizer(), sampler, rules);
    const DecodeRun r = decode_session(s, d, logits, RunLast::kYes, {});
    int64_t unused = 0;
    if (by_hand(prompt, 4, false, unused).size() == 4u) {  // no end of generation among the first four
        EXPECT_EQ(r.reason, FinishReason::kContextFull);
        EXPECT_TRUE(r.context_full);
        EXPECT_EQ(d.generated(), 4);
        EXPECT_EQ(s.n_tokens(), n_ctx);
    }
    // max_tokens 0 samples nothing and leaves the logits as they were.
    Sampler s0(greedy());
    StopRules none;
    none.max_tokens = 0;
    DecodeDriver z(tokenizer(), s0, none);
    std::vector<float> kept = logits;
    const DecodeRun r0 = decode_session(s, z, kept, RunLast::kYes, {});
    EXPECT_EQ(r0.reason, FinishReason::kMaxTokens);
    EXPECT_EQ(z.generated(), 0);
    EXPECT_TRUE(r0.logits_current);
    EXPECT_EQ(kept, logits);
}

}  // namespace
}  // namespace kvsieve
