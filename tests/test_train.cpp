// The training stack: schedules, data determinism, the loop's checkpoint/resume.
#include <gtest/gtest.h>

#include <cctype>

#include <csignal>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "eval/tasks.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/model_config.h"
#include "model/llama_model.h"
#include "fit/kvzap_fit.h"
#include "predict/kvzap_model.h"
#include "test_util.h"
#include "trainer_cli_fixture.h"
#include "text/tokenizer.h"
#include "train/data.h"
#include "train/palindrome.h"
#include "train/kvzap_mlp.h"
#include "train/loop.h"
#include "train/mirror.h"
#include "train/optim.h"
#include "util/error.h"

namespace kvsieve {
namespace {

TEST(Schedule, CosineAndWsdShapes) {
    train::Schedule s;
    s.kind = "cosine";
    s.warmup = 10;
    s.total = 110;
    s.min_ratio = 0.1;
    EXPECT_NEAR(s.factor(0), 0.1, 1e-12);
    EXPECT_NEAR(s.factor(9), 1.0, 1e-12);
    EXPECT_NEAR(s.factor(60), 0.1 + 0.9 * 0.5, 1e-12);  // halfway: cos(π/2) = 0
    EXPECT_NEAR(s.factor(110), 0.1, 1e-12);
    s.kind = "wsd";
    s.decay_fraction = 0.2;  // decay over steps 88 … 110
    EXPECT_NEAR(s.factor(50), 1.0, 1e-12);
    EXPECT_NEAR(s.factor(88), 1.0, 1e-12);
    EXPECT_NEAR(s.factor(99), 1.0 - 0.9 * 0.5, 1e-12);
    EXPECT_NEAR(s.factor(110), 0.1, 1e-12);
    s.kind = "linear-ish";
    EXPECT_THROW(s.factor(20), std::exception);
}

std::unique_ptr<Tokenizer> stories_tokenizer() {
    GGUFFile f(test::model_path("stories260K.gguf"));
    return Tokenizer::from_gguf(f);
}

std::string story_text() {
    std::string s;
    for (int i = 0; i < 30; ++i)
        s += "Once upon a time there was a little dog named Max number " + std::to_string(i) +
             ". He liked to run in the park and play with his red ball.\n";
    return s;
}

TEST(TrainData, BatchesArePureFunctionsOfSeedAndStep) {
    const auto tok = stories_tokenizer();
    const train::TextStream text({story_text()}, *tok, 0.1);
    train::MixSpec mix;
    mix.synthetic_fraction = 0.5;
    mix.tasks = {{"niah_single_1", 1.0}, {"vt", 1.0}};
    mix.lengths = {160, 320};
    mix.tokens_per_batch = 640;
    const std::string hay = story_text();
    const auto a = train::make_batch(mix, text, *tok, hay, 7, 3), b = train::make_batch(mix, text, *tok, hay, 7, 3);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.weight, b.weight);
    EXPECT_EQ(a.B * a.T, static_cast<int64_t>(a.tokens.size()));
    bool differs = false;
    for (int64_t s = 4; s < 12 && !differs; ++s)
        differs = train::make_batch(mix, text, *tok, hay, 7, s).tokens != a.tokens;
    EXPECT_TRUE(differs);
    for (int64_t r = 0; r < a.B; ++r) EXPECT_EQ(a.tokens[r * a.T], tok->vocab().bos);
}

TEST(TrainData, SyntheticSequenceEndsWithTheWeightedAnswer) {
    const auto tok = stories_tokenizer();
    int64_t a0 = 0;
    const auto s = train::synthetic_sequence("niah_single_1", 300, *tok, "", 11, 0.5f, 3.0f, &a0);
    const TaskExample ex = make_task_example("niah_single_1", 300, *tok, "", 11);
    ASSERT_GT(a0, 0);
    EXPECT_EQ(s.tokens.back(), tok->vocab().eos);
    const std::string answer = tok->decode(std::vector<int32_t>(s.tokens.begin() + a0, s.tokens.end() - 1));
    EXPECT_EQ(answer, " " + ex.answers[0] + ".");
    EXPECT_EQ(s.weight[a0 - 1], 0.5f);
    EXPECT_EQ(s.weight[a0], 3.0f);
    EXPECT_LE(a0, 300 + 1);  // the prompt fits the length (BOS included)
}

TEST(TrainData, RepeatTaskCopiesItsWindowAfterTheInstruction) {
    const auto tok = stories_tokenizer();
    const train::TextStream text({story_text()}, *tok, 0.0);
    uint64_t st = 5;
    const auto s = train::repeat_sequence(text, *tok, 200, st, 0.25f, 2.0f);
    const auto instr = tok->encode("\n\nRepeat the previous context exactly.\n", false);
    ASSERT_LE(s.tokens.size(), 200u);
    const size_t n = (s.tokens.size() - 2 - instr.size()) / 2;  // BOS, window, instruction, window, EOS
    EXPECT_EQ(s.tokens.front(), tok->vocab().bos);
    EXPECT_EQ(s.tokens.back(), tok->vocab().eos);
    EXPECT_TRUE(std::equal(s.tokens.begin() + 1, s.tokens.begin() + 1 + n, s.tokens.begin() + 1 + n + instr.size()));
    EXPECT_TRUE(std::equal(instr.begin(), instr.end(), s.tokens.begin() + 1 + n));
    EXPECT_EQ(s.weight[n + instr.size()], 0.25f);     // last instruction token
    EXPECT_EQ(s.weight[n + instr.size() + 1], 2.0f);  // first copied token
    EXPECT_THROW(train::repeat_sequence(text, *tok, 20, st, 1, 1), Error);
}

/// Checks the reconstruction layout (BOS, n body tokens, the instruction, the body again, EOS; the copy starts
/// at a0 with weight `aw`, the token before it weighs `pw`) and returns n.
size_t expect_reconstruction_row(const train::Sequence& s, const Tokenizer& tok, size_t max_len, int64_t a0, float pw,
                                 float aw) {
    const auto instr = tok.encode("\n\nRepeat the previous context exactly.\n", false);
    EXPECT_LE(s.tokens.size(), max_len);
    const size_t n = (s.tokens.size() - 2 - instr.size()) / 2;
    EXPECT_EQ(static_cast<size_t>(a0), 1 + n + instr.size());
    EXPECT_EQ(s.tokens.front(), tok.vocab().bos);
    EXPECT_EQ(s.tokens.back(), tok.vocab().eos);
    EXPECT_TRUE(std::equal(instr.begin(), instr.end(), s.tokens.begin() + 1 + n));
    EXPECT_TRUE(std::equal(s.tokens.begin() + 1, s.tokens.begin() + 1 + n, s.tokens.begin() + a0));
    EXPECT_EQ(s.weight[a0 - 1], pw);
    EXPECT_EQ(s.weight[a0], aw);
    return n;
}

TEST(TrainData, CopyTaskRepeatsRandomNormalTokens) {
    const auto tok = stories_tokenizer();
    uint64_t st = 9, st2 = 9;
    int64_t a0 = 0;
    const auto s = train::copy_sequence(*tok, 120, st, 0.5f, 2.0f, &a0);
    const size_t n = expect_reconstruction_row(s, *tok, 120, a0, 0.5f, 2.0f);
    std::set<int32_t> distinct(s.tokens.begin() + 1, s.tokens.begin() + 1 + n);
    EXPECT_GT(distinct.size(), n / 2);  // random, not a constant run
    for (size_t i = 1; i <= n; ++i) EXPECT_EQ(tok->vocab().types[s.tokens[i]], TokenType::kNormal);
    EXPECT_EQ(train::copy_sequence(*tok, 120, st2, 0.5f, 2.0f).tokens, s.tokens);  // deterministic in the seed
    EXPECT_THROW(train::copy_sequence(*tok, 20, st, 1, 1), Error);
    uint64_t st3 = 9;  // the by-name entry point makes the same row, and refuses a task that is not a copy task
    EXPECT_EQ(train::copy_task_sequence("copy", *tok, 120, st3, 0.5f, 2.0f).tokens, s.tokens);
    EXPECT_THROW(train::copy_task_sequence("repeat", *tok, 120, st3, 1, 1), Error);
}

TEST(TrainData, CopyCodesTaskRepeatsNumbersAndCapitalNames) {
    const auto tok = stories_tokenizer();
    uint64_t st = 5, st2 = 5;
    int64_t a0 = 0;
    const auto s = train::copy_codes_sequence(*tok, 200, st, 0.5f, 2.0f, &a0);
    const size_t n = expect_reconstruction_row(s, *tok, 200, a0, 0.5f, 2.0f);
    // The body is codes only: digits, capitals and spaces, both kinds present, from a small alphabet.
    const std::string body = tok->decode(std::vector<int32_t>(s.tokens.begin() + 1, s.tokens.begin() + 1 + n));
    size_t digits = 0, caps = 0;
    for (char c : body) {
        EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c)) ||
                    c == ' ')
            << "unexpected character '" << c << "' in " << body;
        digits += std::isdigit(static_cast<unsigned char>(c)) != 0;
        caps += std::isupper(static_cast<unsigned char>(c)) != 0;
    }
    EXPECT_GT(digits, 10u);
    EXPECT_GT(caps, 10u);
    std::set<int32_t> distinct(s.tokens.begin() + 1, s.tokens.begin() + 1 + n);
    EXPECT_LT(distinct.size(), n / 2);  // tokens recur: copying must match more than the last token
    EXPECT_EQ(train::copy_codes_sequence(*tok, 200, st2, 0.5f, 2.0f).tokens, s.tokens);  // deterministic in the seed
    EXPECT_THROW(train::copy_codes_sequence(*tok, 20, st, 1, 1), Error);
}

/// The pieces of a recall-style row's answer tokens (weight 3.0), spaces dropped (answer pieces carry the
/// SentencePiece space marker); every token must weigh 0.5 (prompt) or 3.0 (answer).
std::string answer_pieces(const Tokenizer& tok, const train::Sequence& s) {
    std::string out;
    for (size_t i = 0; i < s.tokens.size(); ++i) {
        EXPECT_TRUE(s.weight[i] == 0.5f || s.weight[i] == 3.0f) << i;
        if (s.weight[i] == 3.0f)
            for (char c : tok.token_to_piece(s.tokens[i]))
                if (c != ' ') out += c;
    }
    return out;
}

TEST(TrainData, RecallTaskWeighsOnlyTheRecalledValues) {
    const auto tok = stories_tokenizer();
    uint64_t st = 3, st2 = 3;
    int64_t a0 = -1;
    const auto s = train::recall_sequence(*tok, 400, st, 0.5f, 3.0f, &a0);
    ASSERT_LE(s.tokens.size(), 400u);
    EXPECT_GT(s.tokens.size(), 300u);  // filled to the length with needles
    EXPECT_EQ(s.tokens.front(), tok->vocab().bos);
    EXPECT_EQ(s.tokens.back(), tok->vocab().eos);
    const std::string text = tok->decode(s.tokens);
    const size_t recall_at = text.find("Recall them.");
    ASSERT_NE(recall_at, std::string::npos);
    // Each needle's value is recalled under the same key, and the weighted tokens spell exactly those values.
    std::map<std::string, std::string> needles;
    const std::string nd = "One of the special magic numbers for ", rc = "The special magic number for ";
    for (size_t p = text.find(nd); p != std::string::npos && p < recall_at; p = text.find(nd, p + 1)) {
        const size_t k0 = p + nd.size(), k1 = text.find(" is: ", k0);
        needles[text.substr(k0, k1 - k0)] = text.substr(k1 + 5, 7);
    }
    ASSERT_GE(needles.size(), 2u);
    std::string weighted, expected;
    size_t recalled = 0;
    for (size_t p = text.find(rc, recall_at); p != std::string::npos; p = text.find(rc, p + 1), ++recalled) {
        const size_t k0 = p + rc.size(), k1 = text.find(" is: ", k0);
        const std::string key = text.substr(k0, k1 - k0), val = text.substr(k1 + 5, 7);
        ASSERT_TRUE(needles.count(key)) << key;
        EXPECT_EQ(needles[key], val);
        expected += val + ".";
    }
    EXPECT_EQ(recalled, needles.size());
    for (char c : answer_pieces(*tok, s))
        if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') weighted += c;
    EXPECT_EQ(weighted, expected);
    EXPECT_GT(a0, static_cast<int64_t>(0));
    EXPECT_EQ(s.weight[a0], 3.0f);
    EXPECT_EQ(s.weight[a0 - 1], 0.5f);
    EXPECT_EQ(train::recall_sequence(*tok, 400, st2, 0.5f, 3.0f).tokens, s.tokens);  // deterministic in the seed
    EXPECT_THROW(train::recall_sequence(*tok, 40, st, 1, 1), Error);
}

TEST(TrainData, LinksTaskRecallsTheVariableAssignedEachKey) {
    const auto tok = stories_tokenizer();
    uint64_t st = 5, st2 = 5;
    int64_t a0 = -1;
    const auto s = train::links_sequence(*tok, 400, st, 0.5f, 3.0f, &a0);
    ASSERT_LE(s.tokens.size(), 400u);
    EXPECT_GT(s.tokens.size(), 300u);
    EXPECT_EQ(s.tokens.back(), tok->vocab().eos);
    const std::string text = tok->decode(s.tokens);
    const size_t recall_at = text.find("Recall them.");
    ASSERT_NE(recall_at, std::string::npos);
    // Links "VAR X = VAR Y." map Y to X; every recall line names a Y and answers its X.
    std::map<std::string, std::string> assigned;
    for (size_t p = text.find("VAR "); p != std::string::npos && p < recall_at; p = text.find("VAR ", p + 1)) {
        const std::string x = text.substr(p + 4, 5);
        ASSERT_EQ(text.substr(p + 9, 7), " = VAR ") << text.substr(p, 20);
        assigned[text.substr(p + 16, 5)] = x;
        p += 16;
    }
    ASSERT_GE(assigned.size(), 2u);
    const std::string q = "The variable assigned VAR ";
    std::string expected;
    size_t recalled = 0;
    for (size_t p = text.find(q, recall_at); p != std::string::npos; p = text.find(q, p + 1), ++recalled) {
        const std::string y = text.substr(p + q.size(), 5);
        ASSERT_EQ(text.substr(p + q.size() + 5, 5), " is: ");
        ASSERT_TRUE(assigned.count(y)) << y;
        EXPECT_EQ(text.substr(p + q.size() + 10, 6), assigned[y] + ".");
        expected += assigned[y] + ".";
    }
    EXPECT_EQ(recalled, assigned.size());
    EXPECT_EQ(answer_pieces(*tok, s), expected);
    EXPECT_GT(a0, static_cast<int64_t>(0));
    EXPECT_EQ(train::links_sequence(*tok, 400, st2, 0.5f, 3.0f).tokens, s.tokens);
    EXPECT_THROW(train::links_sequence(*tok, 30, st, 1, 1), Error);
}

TEST(TrainData, LinksWordsTaskUsesOneTokenNames) {
    const auto tok = stories_tokenizer();
    uint64_t st = 6, st2 = 6;
    const auto s = train::links_words_sequence(*tok, 300, st, 0.5f, 3.0f);
    ASSERT_LE(s.tokens.size(), 300u);
    const std::string text = tok->decode(s.tokens);
    const size_t recall_at = text.find("Recall them.");
    ASSERT_NE(recall_at, std::string::npos);
    const auto var = tok->encode("VAR", false);
    std::map<std::string, std::string> assigned;
    size_t links = 0;
    for (size_t p = text.find("VAR "); p != std::string::npos && p < recall_at; p = text.find("VAR ", p + 1)) {
        const size_t eq = text.find(" = VAR ", p), dot = text.find('.', eq);
        const std::string x = text.substr(p + 4, eq - p - 4), y = text.substr(eq + 7, dot - eq - 7);
        for (const auto& w : {x, y}) {  // "VAR w" is the tokens of "VAR" and one more: the name is one token
            auto ids = tok->encode("VAR " + w, false);
            ASSERT_EQ(ids.size(), var.size() + 1) << w;
            ids.pop_back();
            EXPECT_EQ(ids, var);
            EXPECT_GE(w.size(), 3u);
        }
        assigned[y] = x;
        p = eq + 7;
        ++links;
    }
    ASSERT_GE(links, 4u);
    EXPECT_EQ(assigned.size(), links);  // keys distinct
    const std::string q = "The variable assigned VAR ";
    std::string expected;
    for (size_t p = text.find(q, recall_at); p != std::string::npos; p = text.find(q, p + 1)) {
        const size_t is = text.find(" is: ", p), dot = text.find('.', is);
        const std::string y = text.substr(p + q.size(), is - p - q.size());
        ASSERT_TRUE(assigned.count(y)) << y;
        EXPECT_EQ(text.substr(is + 5, dot - is - 5), assigned[y]);
        expected += assigned[y] + ".";
    }
    EXPECT_EQ(answer_pieces(*tok, s), expected);
    EXPECT_EQ(train::links_words_sequence(*tok, 300, st2, 0.5f, 3.0f).tokens, s.tokens);
}

TEST(TrainData, PalindromeRowsAnswerWithTheListReversed) {
    const auto tok = stories_tokenizer();
    // The digit form: the answer spells the numbers of the list in the opposite order.
    uint64_t st = 9;
    int64_t a0 = -1;
    const auto s = train::palindrome_sequence(*tok, 400, st, 0.0f, 1.0f, &a0);
    const std::string text = tok->decode(s.tokens);
    // App. G's order: the list, then the instruction, then the reversal.
    const size_t at = text.find("Numbers:"), end = text.find('\n', at), rev = text.find("\nReversed:");
    ASSERT_NE(at, std::string::npos);
    ASSERT_NE(end, std::string::npos);
    ASSERT_NE(rev, std::string::npos);
    ASSERT_LT(end, rev);
    EXPECT_NE(text.substr(end, rev - end).find("opposite order"), std::string::npos);
    std::vector<std::string> list, answer;
    {
        std::istringstream in(text.substr(at + 8, end - at - 8)), out(text.substr(rev + 10));
        for (std::string w; in >> w;) list.push_back(w);
        for (std::string w; out >> w;) answer.push_back(w);
    }
    ASSERT_EQ(list.size(), 32u);
    ASSERT_EQ(answer.size(), 32u);
    for (size_t i = 0; i < 32; ++i) EXPECT_EQ(answer[i], list[31 - i]);
    for (size_t i = 0; i < s.tokens.size(); ++i) EXPECT_EQ(s.weight[i], static_cast<int64_t>(i) >= a0 ? 1.0f : 0.0f);

    // The one-token form: 90 distinct ordinary ids outside the prompt, one per number, the answer the list
    // reversed token for token, then EOS.
    const std::vector<int32_t> ids = train::palindrome_number_tokens(*tok);
    ASSERT_EQ(ids.size(), 90u);
    EXPECT_EQ(std::set<int32_t>(ids.begin(), ids.end()).size(), 90u);
    uint64_t st2 = 9, st3 = 9;
    int64_t b0 = -1;
    const auto t = train::palindrome_tokens_sequence(*tok, 400, st2, 0.0f, 1.0f, &b0);
    ASSERT_EQ(t.tokens.back(), tok->vocab().eos);
    ASSERT_EQ(static_cast<int64_t>(t.tokens.size()), b0 + 33);
    const std::set<int32_t> numbers(ids.begin(), ids.end());
    std::vector<int32_t> in_prompt;
    for (int64_t i = 0; i < b0; ++i)
        if (numbers.count(t.tokens[static_cast<size_t>(i)])) in_prompt.push_back(t.tokens[static_cast<size_t>(i)]);
    ASSERT_EQ(in_prompt.size(), 32u);  // the list, and no number token anywhere else in the prompt
    // The list ends more than 50 tokens before the answer begins (the instruction between them), so a window of 32
    // tokens holds none of it: the last number sits right before the gap.
    const int64_t gap = train::palindrome_gap_tokens(*tok);
    EXPECT_GT(gap, 50);
    EXPECT_EQ(t.tokens[static_cast<size_t>(b0 - gap - 1)], in_prompt[31]);
    EXPECT_EQ(t.tokens[static_cast<size_t>(b0 - gap - 32)], in_prompt[0]);
    for (size_t i = 0; i < 32; ++i) EXPECT_EQ(t.tokens[static_cast<size_t>(b0) + i], in_prompt[31 - i]);
    EXPECT_EQ(t.weight[static_cast<size_t>(b0) - 1], 0.0f);
    EXPECT_EQ(t.weight[static_cast<size_t>(b0)], 1.0f);
    // The same numbers as the digit row drawn from the same seed.
    for (size_t i = 0; i < 32; ++i) EXPECT_EQ(in_prompt[i], ids[static_cast<size_t>(std::stoi(list[i]) - 10)]) << i;
    EXPECT_EQ(train::palindrome_tokens_sequence(*tok, 400, st3, 0.0f, 1.0f).tokens, t.tokens);
    EXPECT_THROW(train::palindrome_tokens_sequence(*tok, 100, st3, 0.0f, 1.0f), Error);
    EXPECT_EQ(train::recall_style_maker("palindrome_tokens"), &train::palindrome_tokens_sequence);
    // The mixed form: lists of 2 … 32 numbers, answered the same way; both ends of the range occur.
    std::set<int64_t> counts;
    uint64_t st4 = 3;
    for (int r = 0; r < 400; ++r) {
        int64_t c0 = -1;
        const auto m = train::palindrome_tokens_mixed_sequence(*tok, 400, st4, 0.0f, 1.0f, &c0);
        const int64_t n = static_cast<int64_t>(m.tokens.size()) - 1 - c0;  // answer numbers (EOS excluded)
        ASSERT_GE(n, 2);
        ASSERT_LE(n, 32);
        counts.insert(n);
        std::vector<int32_t> listed;
        for (int64_t i = 0; i < c0; ++i)
            if (numbers.count(m.tokens[static_cast<size_t>(i)])) listed.push_back(m.tokens[static_cast<size_t>(i)]);
        ASSERT_EQ(static_cast<int64_t>(listed.size()), n);
        for (int64_t i = 0; i < n; ++i)
            EXPECT_EQ(m.tokens[static_cast<size_t>(c0 + i)], listed[static_cast<size_t>(n - 1 - i)]);
    }
    EXPECT_TRUE(counts.count(2) && counts.count(32));
}

TEST(TrainData, PalindromeTallySplitsAnswersByIndexAndByWhetherTheirCueRepeats) {
    // A hand-made row: prompt [1 5 7 5 9 3], answer 9 5 7 5 (the list 5 7 5 9 reversed), EOS 2. Answer 0 (9) has no
    // cue; answer 1 (5) follows 9 (once in the list: unique); answer 2 (7) follows 5 (twice: repeated); answer 3
    // (5) follows 7 (unique); index 4 is EOS.
    train::Sequence s;
    s.tokens = {1, 5, 7, 5, 9, 3, 9, 5, 7, 5, 2};
    s.weight.assign(s.tokens.size(), 0.0f);
    const int64_t a0 = 6;
    std::vector<uint8_t> hits(s.tokens.size() - 1, 0);
    hits[a0 - 1] = 1;      // answer 0 right
    hits[a0 + 2 - 1] = 1;  // answer 2 right (repeated cue)
    hits[a0 + 4 - 1] = 1;  // EOS right
    train::PalindromeTally t;
    t.add(s, a0, hits);
    hits.assign(hits.size(), 1);  // a second, all-correct row
    t.add(s, a0, hits);
    const auto j = t.to_json("acc_");
    EXPECT_DOUBLE_EQ(j["acc_unique_cue"].get<double>(), 2.0 / 4.0);    // answers 1 and 3, right in row 2 only
    EXPECT_DOUBLE_EQ(j["acc_repeated_cue"].get<double>(), 2.0 / 2.0);  // answer 2, right in both
    // By the answer's own number: 5 (answers 1 and 3) occurs twice, 9 and 7 (answers 0 and 2) once.
    EXPECT_DOUBLE_EQ(j["acc_repeated_number"].get<double>(), 2.0 / 4.0);
    EXPECT_DOUBLE_EQ(j["acc_unique_number"].get<double>(), 4.0 / 4.0);
    const std::vector<double> by = j["acc_by_index"].get<std::vector<double>>();
    EXPECT_EQ(by, (std::vector<double>{1.0, 0.5, 1.0, 0.5, 1.0}));
    // Without repeated cues the class is null, not 0.
    train::PalindromeTally u;
    train::Sequence d;
    d.tokens = {1, 5, 7, 3, 7, 5, 2};
    d.weight.assign(d.tokens.size(), 0.0f);
    u.add(d, 4, std::vector<uint8_t>(d.tokens.size() - 1, 1));
    EXPECT_TRUE(u.to_json("")["repeated_cue"].is_null());
    EXPECT_DOUBLE_EQ(u.to_json("")["unique_cue"].get<double>(), 1.0);
    EXPECT_THROW(u.add(d, 4, std::vector<uint8_t>(3, 1)), Error);  // predictions of another row
    EXPECT_THROW(u.add(d, 9, std::vector<uint8_t>(d.tokens.size() - 1, 1)), Error);
}

TEST(TrainData, ChainsTaskAnswersEachChainByFollowingItsLinks) {
    const auto tok = stories_tokenizer();
    for (uint64_t seed : {7u, 8u, 9u}) {
        uint64_t st = seed, st2 = seed;
        int64_t a0 = -1;
        const auto s = train::chains_sequence(*tok, 600, st, 0.5f, 3.0f, &a0);
        ASSERT_LE(s.tokens.size(), 600u);
        EXPECT_GT(s.tokens.size(), 400u);  // chains are added while they fit
        EXPECT_EQ(s.tokens.back(), tok->vocab().eos);
        const std::string text = tok->decode(s.tokens);
        const size_t q_at = text.find("\nQuestion:");
        ASSERT_NE(q_at, std::string::npos);
        // Parse the statements "VAR X = 1234567." / "VAR X = VAR Y." and follow each value's chain.
        std::map<std::string, std::string> next;  // value or name -> the name assigned it
        size_t statements = 0;
        for (size_t p = text.find("VAR "); p != std::string::npos && p < q_at; ++statements) {
            const std::string x = text.substr(p + 4, 5);
            ASSERT_EQ(text.substr(p + 9, 3), " = ") << text.substr(p, 24);
            const size_t r = p + 12, dot = text.find('.', r);
            const std::string rhs = text.substr(r, dot - r);
            const std::string src = rhs.rfind("VAR ", 0) == 0 ? rhs.substr(4) : rhs;
            ASSERT_EQ(next.count(src), 0u) << "two variables assigned " << src;
            next[src] = x;
            p = text.find("VAR ", dot);
        }
        // One question per chain; each answer lists the chain from its value in order, as many as announced.
        const std::string qv = "assigned the value ", they = ", they are:";
        std::string expected;
        size_t questions = 0;
        for (size_t p = text.find(qv, q_at); p != std::string::npos;
             p = text.find(qv, text.find(they, p)), ++questions) {
            const std::string value = text.substr(p + qv.size(), 7);
            std::vector<std::string> chain;
            for (std::string at = value; next.count(at); at = next[at]) chain.push_back(next[at]);
            ASSERT_FALSE(chain.empty()) << value;
            const size_t announce = text.rfind(" variables are", text.find(they, p));
            const size_t num0 = text.rfind(' ', announce - 1) + 1;
            EXPECT_EQ(std::stoul(text.substr(num0, announce - num0)), chain.size());
            std::string listed = " ";
            for (size_t i = 0; i < chain.size(); ++i) listed += (i ? ", " : "") + chain[i];
            const size_t a = text.find(they, p) + they.size();
            EXPECT_EQ(text.substr(a, listed.size() + 1), listed + ".");
            for (size_t i = 0; i < chain.size(); ++i) expected += (i ? "," : "") + chain[i];
            expected += ".";
        }
        EXPECT_GE(questions, 2u);
        EXPECT_EQ(statements % questions, 0u);  // every chain has the row's hop count
        EXPECT_EQ(answer_pieces(*tok, s), expected);
        EXPECT_GT(a0, static_cast<int64_t>(q_at / 8));
        EXPECT_EQ(train::chains_sequence(*tok, 600, st2, 0.5f, 3.0f).tokens, s.tokens);
    }
    uint64_t st = 1;
    EXPECT_THROW(train::chains_sequence(*tok, 40, st, 1, 1), Error);
}

TEST(TrainData, HeldOutTailIsNotInTheTrainingStream) {
    const auto tok = stories_tokenizer();
    const std::string text = story_text();
    const train::TextStream ts({text}, *tok, 0.2);
    const std::string& ho = ts.heldout_text(0);
    ASSERT_FALSE(ho.empty());
    EXPECT_EQ(text.substr(text.size() - ho.size()), ho);
    EXPECT_EQ(ho.front(), 'O');  // cut at a line start
    EXPECT_NEAR(static_cast<double>(ho.size()) / text.size(), 0.2, 0.05);
}

TEST(TrainData, HeldOutWindowsComeFromTheirOwnFile) {
    const auto tok = stories_tokenizer();
    const std::string a = story_text(), b = "Tom had a red ball.\nHe gave it to Sue.\nShe was happy.\n";
    const train::TextStream ts({a, b}, *tok, 0.5);
    ASSERT_EQ(ts.files(), 2u);
    const auto hb = tok->encode(ts.heldout_text(1), false);
    const auto w = ts.heldout_windows(1, 4, 100);
    ASSERT_EQ(w.size(), (hb.size()) / 3);  // BOS + 3 tokens each, in order, no overlap
    for (size_t k = 0; k < w.size(); ++k) {
        ASSERT_EQ(w[k].tokens.size(), 4u);
        EXPECT_EQ(w[k].tokens[0], tok->vocab().bos);
        EXPECT_TRUE(std::equal(w[k].tokens.begin() + 1, w[k].tokens.end(), hb.begin() + 3 * k));
    }
    EXPECT_EQ(ts.heldout_windows(0, 64, 2).size(), 2u);  // the count caps the windows of a long file
    EXPECT_THROW(ts.heldout_windows(2, 4, 1), std::out_of_range);
}

/// Trains a 1-layer model for `steps` steps on a fixed batch stream and returns the log's losses by step.
std::map<int64_t, double> run_tiny(const std::string& dir, int64_t steps, bool resume, int64_t stop_after = -1) {
    ModelConfig c;
    c.arch_name = "llama";
    c.n_layer = 1;
    c.n_embd = 32;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim = 8;
    c.n_rot = 8;
    c.n_ff = 64;
    c.n_vocab = 64;
    c.n_ctx_train = 64;
    torch::manual_seed(3);
    train::LlamaMirror m(c);
    train::LoopOptions o;
    o.steps = steps;
    o.out_dir = dir;
    o.resume = resume;
    o.progress = false;
    o.log_every = 1;
    o.checkpoint_every = 1000;
    o.schedule.warmup = 2;
    o.schedule.total = steps;
    train::ParamGroup g{"all", m->parameters(), 1e-2, 0.1};
    train::TrainLoop loop(*m, {g}, o);
    auto micro = [&](int64_t step, int64_t) {
        if (step == stop_after) std::raise(SIGINT);  // interrupted during this step: it finishes, then checkpoints
        torch::manual_seed(static_cast<uint64_t>(100 + step));
        // Counting sequences from random starts: learnable (next = current + 1), different every step.
        auto toks = (torch::randint(0, 64, {2, 1}, torch::kInt64) + torch::arange(16, torch::kInt64)) % 64;
        auto logits = m->forward(toks);
        train::MicroResult r;
        r.loss = torch::nn::functional::cross_entropy(logits.narrow(1, 0, 15).reshape({-1, 64}),
                                                      toks.narrow(1, 1, 15).reshape({-1}));
        r.tokens = 32;
        return r;
    };
    loop.run(micro, nullptr, nullptr);
    std::map<int64_t, double> losses;
    std::ifstream f(dir + "/log.jsonl");
    for (std::string line; std::getline(f, line);) {
        const auto j = nlohmann::json::parse(line);
        if (j.contains("loss")) losses[j["step"].get<int64_t>()] = j["loss"].get<double>();
    }
    return losses;
}

TEST(TrainLoop, InterruptedRunResumesOnTheSameLossCurve) {
    const auto base = std::filesystem::temp_directory_path() / ("kvsieve_loop_" + std::to_string(::getpid()));
    const std::string full = (base / "full").string(), cut = (base / "cut").string();
    const auto ref = run_tiny(full, 8, false);
    ASSERT_EQ(ref.size(), 8u);
    EXPECT_LT(ref.at(8), ref.at(1));               // it learns
    const auto part = run_tiny(cut, 8, false, 4);  // SIGINT during step 4 → checkpoint at step 5
    EXPECT_EQ(part.size(), 5u);
    EXPECT_TRUE(std::filesystem::exists(cut + "/checkpoint.pt"));
    EXPECT_THROW(run_tiny(cut, 8, false), Error);  // never overwrites a run
    const auto resumed = run_tiny(cut, 8, true);
    ASSERT_EQ(resumed.size(), 8u);
    for (const auto& [step, loss] : ref) EXPECT_NEAR(resumed.at(step), loss, 1e-5) << "step " << step;
    EXPECT_THROW(run_tiny((base / "none").string(), 8, true), Error);  // nothing to resume
    std::filesystem::remove_all(base);
}

struct Cli {
    int status;
    std::string err;
};

Cli run_cli(const std::string& args) {
    test::TempFile err(".err");
    const int st = std::system((std::string(KVSIEVE_BIN) + " " + args + " >/dev/null 2>" + err.path()).c_str());
    std::ifstream e(err.path());
    return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, std::string(std::istreambuf_iterator<char>(e), {})};
}

class PretrainCli : public test::TrainerCliTest {
protected:
    PretrainCli() : TrainerCliTest("kvsieve_pretrain_") {}
    void SetUp() override {
        std::ofstream(dir_ / "text.txt") << story_text();
        cfg_ = {
            {"out", (dir_ / "run").string()},
            {"output", (dir_ / "out.gguf").string()},
            {"model", {{"n_layer", 1}, {"n_embd", 32}, {"n_head", 4}, {"n_head_kv", 2}, {"n_ff", 64}, {"n_ctx", 512}}},
            {"tokenizer", {{"from_gguf", test::model_path("stories260K.gguf")}}},
            {"data",
             {{"text", {(dir_ / "text.txt").string()}},
              {"haystack", {(dir_ / "text.txt").string()}},
              {"tasks", {{"niah_single_1", 1}}},
              {"lengths", {320}},
              {"tokens_per_batch", 640}}},
            {"optim", {{"steps", 3}, {"warmup_steps", 1}}},
            {"eval",
             {{"tasks", {"niah_single_1", "links"}},
              {"length", 300},
              {"samples", 2},
              {"window", 64},
              {"text_windows", 2}}},
            {"threads", 1},
            {"log_every", 1}};
    }
};

TEST_F(PretrainCli, TrainsAndWritesAModelTheEngineLoads) {
    auto cfg = cfg_;
    cfg["data"]["tasks"]["chains"] = 1;  // two chains need more than 320 tokens of tok512: rows fall back to text
    const Cli r = run_cli("train pretrain -q --config " + write(cfg));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("warning: task 'chains' does not fit data.lengths 320 tokens"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("task 'niah_single_1' does not fit"), std::string::npos) << r.err;
    GGUFFile f((dir_ / "out.gguf").string());
    const ModelConfig c = ModelConfig::from_gguf(f);
    EXPECT_EQ(c.n_layer, 1);
    EXPECT_EQ(c.n_head_kv, 2);
    EXPECT_EQ(c.n_vocab, 512);  // the tok512 vocabulary it was given
    const auto log = test::read_run_log(dir_ / "run");
    for (const auto& e : log.evals)
        for (const char* k : {"acc_niah_single_1", "acc_links"}) {  // an exact-match and a token accuracy
            ASSERT_TRUE(e.contains(k)) << e.dump();
            EXPECT_GE(e[k].get<double>(), 0.0);
            EXPECT_LE(e[k].get<double>(), 1.0);
        }
    EXPECT_EQ(log.steps.size(), 3u);
    EXPECT_EQ(log.evals.size(), 1u);  // at the end
    // A second run into the same directory refuses to overwrite it.
    auto again = run_cli("train pretrain -q --config " + write(cfg_));
    EXPECT_NE(again.status, 0);
    EXPECT_NE(again.err.find("--resume"), std::string::npos) << again.err;
}

TEST_F(PretrainCli, BadConfigsFailBeforeTraining) {
    auto c1 = cfg_;
    c1["optim"]["lr_max"] = 1;
    auto r = run_cli("train pretrain -q --config " + write(c1));
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("unknown config key 'optim.lr_max'"), std::string::npos) << r.err;
    auto c2 = cfg_;
    c2["data"]["text"] = {(dir_ / "missing.txt").string()};
    r = run_cli("train pretrain -q --config " + write(c2));
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("missing.txt"), std::string::npos) << r.err;
    auto c3 = cfg_;
    c3["data"]["tasks"] = {{"needle_in_a_haystack", 1}};
    r = run_cli("train pretrain -q --config " + write(c3));
    EXPECT_NE(r.err.find("unknown task"), std::string::npos) << r.err;
    auto c6 = cfg_;  // copy rows too long for the batch length: an error, not a crash mid-run
    c6["data"]["tasks"] = {{"copy", 1}};
    c6["data"]["lengths"] = {20};
    r = run_cli("train pretrain -q --config " + write(c6));
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("task 'copy' does not fit data.lengths 20 tokens"), std::string::npos) << r.err;
    auto c5 = cfg_;  // an eval length too short for a task's rows
    c5["eval"]["tasks"] = {"chains"};
    c5["eval"]["length"] = 60;
    r = run_cli("train pretrain -q --config " + write(c5));
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("eval task 'chains' at eval.length 60"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "run" / "checkpoint.pt"));
    auto c7 = cfg_;  // attention supervision: a layer the model lacks, then an unknown key
    c7["attention_supervision"] = {{"weight", 1.0}, {"carry", {5, 0}}, {"lookup", {0, 1}}};
    r = run_cli("train pretrain -q --config " + write(c7));
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("attention_supervision.carry [5, 0] is outside the model's 1 layers"), std::string::npos)
        << r.err;
    c7["attention_supervision"] = {{"weight", 1.0}, {"heads", {0, 1}}};
    r = run_cli("train pretrain -q --config " + write(c7));
    EXPECT_NE(r.err.find("unknown config key 'attention_supervision.heads'"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "run" / "checkpoint.pt"));
    // A GGUF whose architecture the trainer does not know.
    GGUFWriter w;
    w.set_string("general.architecture", "mamba");
    w.write((dir_ / "mamba.gguf").string());
    auto c4 = cfg_;
    c4.erase("model");
    c4["init"] = (dir_ / "mamba.gguf").string();
    r = run_cli("train pretrain -q --config " + write(c4));
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("mamba"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "run" / "checkpoint.pt"));
}

TEST(KVzapMlp, FitsAndTheEngineLoaderReproducesItsPredictions) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    KVzapFitOptions o;
    o.prompts = 10;
    o.min_tokens = 120;
    o.max_tokens = 160;
    o.tokens_per_prompt = 100;
    o.validation = 0.2;
    o.progress = false;
    std::string corpus;
    for (int i = 0; i < 6; ++i) corpus += story_text();
    const KVzapPairs pairs = collect_kvzap_pairs(m, *tok, corpus, o);
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("kvsieve_mlp_" + std::to_string(::getpid()))).string();
    train::KVzapMlpOptions mo;
    mo.epochs = 30;
    mo.batch = 64;
    mo.progress = false;
    const KVzapFitReport r = train::fit_kvzap_mlp(pairs, dir, mo);
    EXPECT_GT(r.mean_r2(), 0.0) << r.table();
    const KVzapModel k = KVzapModel::load(dir);
    EXPECT_TRUE(k.is_mlp());
    EXPECT_EQ(k.n_layers(), m.config().n_layer);
    // The engine's C++ MLP gives the R² the trainer measured with libtorch (same weights, same GELU).
    std::vector<std::vector<float>> pred(pairs.n_layer);
    for (int l = 0; l < pairs.n_layer; ++l) {
        pred[l].resize(static_cast<size_t>(pairs.n_val * pairs.n_head_kv));
        k.predict(l, pairs.x_val[l].data(), pairs.n_val, pred[l].data());
    }
    const auto r2 = kvzap_r2(pairs, pred);
    for (int l = 0; l < pairs.n_layer; ++l)
        for (int h = 0; h < pairs.n_head_kv; ++h) EXPECT_NEAR(r2[l][h], r.r2[l][h], 1e-4);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvsieve
