// Tokenizer test vectors in llama.cpp's format (tests/data/golden/tokenizers; provenance in tests/data/README.md).
// The expected ids of every ggml-vocab-*.out were produced by the models' Hugging Face tokenizers;
// stories260K-tok512.out by llama.cpp and an independent port of llama2.c's encoder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/gguf.h"
#include "text/tokenizer.h"
#include "text/utf8_stream.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

std::string read_file(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::vector<std::string> split_inputs(const std::string& all) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    size_t pos = 0;
    while (true) {
        const size_t k = all.find(sep, pos);
        if (k == std::string::npos) break;
        out.push_back(all.substr(pos, k - pos));
        pos = k + sep.size();
    }
    return out;
}

std::vector<std::string> vector_names() {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(test::golden_dir() + "/tokenizers"))
        if (e.path().extension() == ".inp") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

class TokenizerVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVectors, MatchReference) {
    const std::string dir = test::golden_dir() + "/tokenizers/";
    const std::string name = GetParam();
    const std::string vocab_path = name == "stories260K-tok512" ? test::model_path("stories260K.gguf") : dir + name;
    if (!std::filesystem::exists(vocab_path)) GTEST_SKIP() << "vocabulary " << name << " is not distributed";
    GGUFFile f(vocab_path);
    const auto tok = Tokenizer::from_gguf(f);
    const auto inputs = split_inputs(read_file(dir + name + ".inp"));
    std::istringstream expected(read_file(dir + name + ".out"));
    ASSERT_EQ(inputs.size(), 46u);
    int failures = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        std::string line;
        ASSERT_TRUE(std::getline(expected, line)) << "missing expected line " << i;
        std::vector<int32_t> want;
        std::istringstream ls(line);
        for (int32_t id; ls >> id;) want.push_back(id);
        const auto got = tok->encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
        if (got != want) ++failures;
        EXPECT_EQ(got, want) << "input " << i << ": '" << inputs[i] << "'";
        // Decoding gives the input back for byte-level vocabularies (every byte is representable).
        if (f.get_string("tokenizer.ggml.model") == "gpt2") {
            EXPECT_EQ(tok->decode(got), inputs[i]) << "round trip of input " << i;
        }
    }
    EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Golden, TokenizerVectors, ::testing::ValuesIn(vector_names()), [](const auto& info) {
    std::string s = info.param;
    for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
});

TEST(Tokenizer, SpmAddsBosAndSpacePrefix) {
    GGUFFile f(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(f);
    const auto ids = tok->encode("Once upon a time", true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 1);  // BOS
    // Decoding drops BOS (control) and keeps the space prefix SentencePiece added.
    EXPECT_EQ(tok->decode(ids), " Once upon a time");
    EXPECT_TRUE(tok->is_eog(2));
    EXPECT_FALSE(tok->is_eog(1));
}

TEST(Tokenizer, SpecialTokensParsedOnlyWhenAsked) {
    GGUFFile f(test::golden_dir() + "/tokenizers/ggml-vocab-qwen2.gguf");
    const auto tok = Tokenizer::from_gguf(f);
    const auto with = tok->encode("<|im_start|>user", false, true);
    ASSERT_GE(with.size(), 2u);
    EXPECT_EQ(with[0], 151644);
    const auto without = tok->encode("<|im_start|>user", false, false);
    EXPECT_NE(without[0], 151644);
    EXPECT_GT(without.size(), with.size());
}

TEST(Tokenizer, InvalidUtf8IsAnError) {
    GGUFFile f(test::golden_dir() + "/tokenizers/ggml-vocab-gpt-2.gguf");
    const auto tok = Tokenizer::from_gguf(f);
    EXPECT_THROW(tok->encode(std::string("ab\xff\xfe", 4), false), Error);
}

}  // namespace
}  // namespace kvsieve

namespace kvsieve {
namespace {

TEST(Utf8Stream, JoinsSplitCharactersAndReplacesBrokenOnes) {
    Utf8Stream s;
    EXPECT_EQ(s.push("a\xE2"), "a");  // wait for the rest of U+201C
    EXPECT_EQ(s.push("\x80"), "");
    EXPECT_EQ(s.push("\x9C"
                     "b"),
              "\xE2\x80\x9C"
              "b");
    EXPECT_EQ(s.push("\xE2"
                     "c"),
              "\xEF\xBF\xBD"
              "c");                             // interrupted sequence
    EXPECT_EQ(s.push("\x80"), "\xEF\xBF\xBD");  // stray continuation byte
    EXPECT_EQ(s.push("\xF0\x9F"), "");
    EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");          // unfinished at the end
    EXPECT_EQ(s.push("\xC0\xAF"), "\xEF\xBF\xBD");  // overlong encoding
}

}  // namespace
}  // namespace kvsieve
