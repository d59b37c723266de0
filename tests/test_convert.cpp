// llama2.c import: the converted stories260K equals the GGUF that llama.cpp's converter wrote
// (tests/data/models/stories260K.gguf, see tests/data/README.md) tensor by tensor, and generates the same text.
#include <gtest/gtest.h>

#include <cstring>

#include "io/gguf.h"
#include "model/llama2c.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "test_util.h"
#include "util/error.h"
#include "text/tokenizer.h"

namespace kvsieve {
namespace {

TEST(Convert, Llama2cMatchesReferenceGGUF) {
    test::TempFile out(".gguf");
    convert_llama2c(test::data_dir() + "/models/stories260K.bin", test::data_dir() + "/models/tok512.bin", out.path());
    GGUFFile a(out.path()), b(test::model_path("stories260K.gguf"));
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    for (const auto& tb : b.tensors()) {
        const GGUFTensorInfo* ta = a.find_tensor(tb.name);
        ASSERT_NE(ta, nullptr) << tb.name;
        EXPECT_EQ(ta->shape_str(), tb.shape_str()) << tb.name;
        ASSERT_EQ(ta->nbytes, tb.nbytes);
        EXPECT_EQ(std::memcmp(ta->data, tb.data, tb.nbytes), 0) << tb.name;
    }
    EXPECT_EQ(a.get_string_array("tokenizer.ggml.tokens"), b.get_string_array("tokenizer.ggml.tokens"));
    EXPECT_EQ(a.get_float_array("tokenizer.ggml.scores"), b.get_float_array("tokenizer.ggml.scores"));
    EXPECT_EQ(a.get_int_array("tokenizer.ggml.token_type"), b.get_int_array("tokenizer.ggml.token_type"));
    for (const auto& [k, v] : b.metadata()) {
        const GGUFValue* va = a.find(k);
        ASSERT_NE(va, nullptr) << k;
        if (v.type != GGUFValueType::ARRAY) {
            EXPECT_EQ(va->type, v.type) << k;
            if (v.type == GGUFValueType::STRING)
                EXPECT_EQ(va->s, v.s) << k;
            else
                EXPECT_EQ(va->as_float(), v.as_float()) << k;
        }
    }

    // Same greedy continuation from both files.
    LlamaModel ma(out.path()), mb(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(mb.file());
    const auto prompt = tok->encode("Lily and Ben went to the park. They");
    std::vector<int32_t> ga, gb;
    for (auto [m, g] : {std::pair{&ma, &ga}, std::pair{&mb, &gb}}) {
        DenseKVCache cache = m->make_cache(128);
        std::vector<float> logits;
        m->forward(StepPhase::kPrefill, prompt, cache, logits);
        for (int i = 0; i < 64; ++i) {
            g->push_back(argmax(logits.data(), m->config().n_vocab));
            m->forward(StepPhase::kDecode, {g->back()}, cache, logits);
        }
    }
    EXPECT_EQ(ga, gb);
}

TEST(Convert, SizeMismatchIsReported) {
    test::TempFile out(".gguf");
    try {
        convert_llama2c(test::data_dir() + "/models/tok512.bin", test::data_dir() + "/models/tok512.bin", out.path());
        ADD_FAILURE() << "no error";
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("tok512.bin"), std::string::npos) << e.what(); }
}

}  // namespace
}  // namespace kvsieve
