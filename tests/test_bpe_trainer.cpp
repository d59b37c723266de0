// The BPE vocabulary trainer (text/bpe_trainer.h) with the engine's SPM encoder.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "text/bpe_trainer.h"
#include "text/spm_tokenizer.h"

namespace kvsieve {
namespace {

std::string corpus() {
    std::ifstream f(std::string(KVSIEVE_TEST_DATA) + "/text/english.md");  // any English text would do
    std::stringstream ss;
    ss << f.rdbuf();
    std::string s = ss.str();
    for (int i = 0; i < 40; ++i) s += "the cat sat on the mat and the dog sat on the log 1234 5678\n";
    return s;
}

TEST(BpeTrainer, RoundTripsAndCompresses) {
    const std::string text = corpus();
    BpeTrainOptions o;
    o.vocab_size = 400;
    o.min_char_count = 2;
    SpmTokenizer tok(train_bpe_vocab(text, o));
    EXPECT_EQ(tok.vocab().size(), 400);
    const std::string probe = "the cat sat on the log with 90210 dogs";
    const auto ids = tok.encode(probe, false);
    EXPECT_EQ(tok.decode(ids), " " + probe);  // SentencePiece's space prefix comes back as a leading space
    EXPECT_LT(ids.size(), probe.size() / 2);  // frequent words became single tokens
    // Digits are never merged: each digit of 90210 is one token.
    int digit_tokens = 0;
    for (int32_t id : ids) {
        const std::string p = tok.token_to_piece(id);
        if (p.find_first_of("0123456789") != std::string::npos) {
            EXPECT_EQ(p.size(), 1u) << p;
            ++digit_tokens;
        }
    }
    EXPECT_EQ(digit_tokens, 5);
    // Characters never seen fall back to bytes and still round-trip.
    const std::string odd = "zebra \xC3\xA9\xE2\x82\xAC";
    EXPECT_EQ(tok.decode(tok.encode(odd, false)), " " + odd);
}

TEST(BpeTrainer, ScoresFollowMergeOrder) {
    BpeTrainOptions o;
    o.vocab_size = 420;
    o.min_char_count = 1;
    const Vocab v = train_bpe_vocab(corpus(), o);
    float prev = 1;
    for (int32_t i = 0; i < v.size(); ++i) {
        if (v.types[i] != TokenType::kNormal || v.scores[i] < -1e8f) continue;
        EXPECT_LT(v.scores[i], prev);
        prev = v.scores[i];
    }
    EXPECT_THROW(train_bpe_vocab("", o), std::exception);
    o.vocab_size = 280;
    EXPECT_THROW(train_bpe_vocab(corpus(), o), std::exception);
}

}  // namespace
}  // namespace kvsieve
