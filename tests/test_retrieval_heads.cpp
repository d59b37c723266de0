// Retrieval heads from a calibration text (eval/retrieval_heads.h): the long-range attention mass of each head
// against a direct double-precision computation from the same queries and keys, and `eval retrieval-heads`, whose
// layout gives the most long-range heads the global cache.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "cache/kv_cache.h"
#include "cli_runner.h"
#include "eval/retrieval_heads.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "session/prefill.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {
namespace {

const char* kText =
    "Once upon a time there was a little girl named Lily. She liked to play in the park with her dog Max. One day "
    "they found a big red ball under a tree. Lily threw the ball and Max ran after it. They played until the sun "
    "went down, and then they walked home together, happy and tired. The next morning Lily told her mother about "
    "the ball, and her mother smiled and said that Max was the best dog in the whole town.";

TEST(RetrievalHeads, LongRangeMassIsTheSoftmaxWeightOutsideTheWindowBeyondTheSinks) {
    const LlamaModel& m = test::stories260k();
    const auto tok = Tokenizer::from_gguf(m.file());
    const ModelConfig& c = m.config();
    const int64_t length = 40;
    const int window = 8, sinks = 2;
    const HeadDensityMap got = long_range_attention_mass(m, *tok, kText, length, 2, window, sinks, false);
    ASSERT_EQ(got.n_layer(), c.n_layer);
    ASSERT_EQ(got.n_head_kv(), c.n_head_kv);
    // The same windows, each query's softmax in double precision, written out here.
    const auto ids = tok->encode(kText, false, false);
    const int G = c.gqa_group(), d = c.head_dim;
    std::vector<std::vector<double>> want(c.n_layer, std::vector<double>(c.n_head_kv, 0.0));
    int64_t queries = 0;
    for (int s = 0; s < 2; ++s) {
        std::vector<int32_t> w{tok->vocab().bos};
        w.insert(w.end(), ids.begin() + s * (length - 1), ids.begin() + (s + 1) * (length - 1));
        KVCache cache(c, length, parse_policy("full"), std::make_shared<KVPool>(d, KVType::kF32));
        PrefillPlan plan;
        plan.on_layer = [&](const LayerInputs& in) {
            for (int h = 0; h < c.n_head_kv; ++h)
                for (int g = 0; g < G; ++g)
                    for (int64_t i = window; i < length; ++i) {
                        std::vector<double> e(i + 1);
                        double mx = -1e300, z = 0, far = 0;
                        for (int64_t j = 0; j <= i; ++j) {
                            double dot = 0;
                            for (int x = 0; x < d; ++x)
                                dot += double(in.q[i * c.n_head * d + (h * G + g) * d + x]) *
                                       in.k[j * c.n_head_kv * d + h * d + x];
                            e[j] = dot / std::sqrt(double(d));
                            mx = std::max(mx, e[j]);
                        }
                        for (int64_t j = 0; j <= i; ++j) {
                            z += std::exp(e[j] - mx);
                            if (i - j >= window && j >= sinks) far += std::exp(e[j] - mx);
                        }
                        want[in.layer][h] += far / z;
                    }
        };
        std::vector<float> logits;
        prefill(m, *tok, cache, w, w, plan, logits);
        queries += (length - window) * G;
    }
    for (int l = 0; l < c.n_layer; ++l)
        for (int h = 0; h < c.n_head_kv; ++h) {
            EXPECT_NEAR(got.density[l][h], want[l][h] / queries, 1e-5) << "layer " << l << " head " << h;
            EXPECT_GT(got.density[l][h], 0.0);
            EXPECT_LT(got.density[l][h], 1.0);
        }
    EXPECT_THROW(long_range_attention_mass(m, *tok, kText, length, 2, 40, 0, false), Error);
    EXPECT_THROW(long_range_attention_mass(m, *tok, "short", length, 2, window, 0, false), Error);
}

TEST(RetrievalHeads, TheCommandWritesTheMapAndALayoutOfTheMostLongRangeHeads) {
    const auto dir = std::filesystem::temp_directory_path() / ("kvsieve_rh_" + std::to_string(::getpid()));
    test::TempFile text(".txt");
    std::ofstream(text.path()) << kText << " " << kText;
    const auto r = test::run_cli("eval retrieval-heads -q -m " + test::model_path("stories260K.gguf") + " --corpus " +
                                 text.path() + " --length 48 --samples 2 --window 8 --sinks 2 --global-heads 3 --out " +
                                 dir.string());
    ASSERT_EQ(r.status, 0) << r.err;
    std::ifstream f(dir / "policy.txt");
    std::string spec;
    std::getline(f, spec);
    const Policy p = parse_policy(spec);
    EXPECT_EQ(p.name, "hybrid_heads");
    EXPECT_EQ(p.window, 8);
    EXPECT_EQ(p.sinks, 2);
    EXPECT_NE(r.out.find("retrieval heads (3 of 20)"), std::string::npos) << r.out;
    EXPECT_TRUE(std::filesystem::exists(dir / "retrieval_heads.json"));
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvsieve
