// Saving a sequence (compressed KV cache, history, scorer state, model identity) and restoring it: the restored
// sequence continues exactly as the one never saved, and bad files are one clear error each.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "session/cache_file.h"
#include "session/prefill_plan.h"
#include "session/session.h"
#include "test_util.h"
#include "util/binary_io.h"

namespace kvsieve {
namespace {

const LlamaModel& tiny2k() {
    static const LlamaModel m(test::model_path("kvsieve-tiny-2k.gguf"));
    return m;
}

std::unique_ptr<KVCache> make_cache(const LlamaModel& m, const std::string& spec, KVType t = KVType::kF16) {
    return std::make_unique<KVCache>(m.config(), 512, parse_policy(spec),
                                     std::make_shared<KVPool>(m.config().head_dim, t));
}

std::vector<int32_t> prompt_for(const LlamaModel& m) {
    const auto tok = Tokenizer::from_gguf(m.file());
    std::string text;
    for (int i = 0; i < 12; ++i) text += "Once upon a time, there was a little girl named Lily who liked to play. ";
    return tok->encode(text, true, false);
}

/// Greedy decode of n tokens from logits; returns the ids, and leaves logits after the last one.
std::vector<int32_t> decode(Session& s, std::vector<float>& logits, int n) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) {
        ids.push_back(argmax(logits.data(), s.model().config().n_vocab));
        s.decode(ids.back(), logits);
    }
    return ids;
}

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

void spit(const std::string& path, const std::string& data) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << data;
}

using test::expect_error_contains;

/// Prefill, 10 decode steps, save (with the next token's logits as the caller's extra bytes), then 25 more steps;
/// a cache restored from the file must continue with the same 25 tokens, logits and entries, bit for bit.
void check_continuation(const LlamaModel& m, const std::string& spec) {
    SCOPED_TRACE(spec);
    const auto tok = Tokenizer::from_gguf(m.file());
    test::TempFile file(".kvseq");
    auto ca = make_cache(m, spec);
    Session a(m, *tok, *ca);
    std::vector<float> la;
    PrefillPlan plan;
    plan.chunk = planned_chunk(ca->policy(), 48);  // in one piece where the policy needs it (prefill_plan.h)
    a.prefill(prompt_for(m), plan, la);
    decode(a, la, 10);
    BinaryWriter extra;
    extra.vec(la);
    save_sequence(file.path(), m, a, extra.data());
    const std::vector<int32_t> want = decode(a, la, 25);

    const SavedSequence saved = read_sequence(file.path(), m);
    EXPECT_EQ(saved.policy_spec, spec);
    EXPECT_EQ(saved.n_ctx, 512);
    auto cb = make_cache(m, spec);
    Session b(m, *tok, *cb);
    restore_sequence(b, saved);
    EXPECT_EQ(b.tokens().size() + 25, a.tokens().size());
    BinaryReader r(saved.extra.data(), saved.extra.size(), "extra");
    std::vector<float> lb = r.vec<float>(static_cast<size_t>(m.config().n_vocab));
    EXPECT_EQ(decode(b, lb, 25), want);
    EXPECT_EQ(lb, la);  // bit for bit
    EXPECT_EQ(cb->stats().entries, ca->stats().entries);
    EXPECT_EQ(cb->stats().kv_bytes_final, ca->stats().kv_bytes_final);
    EXPECT_EQ(b.tokens(), a.tokens());
}

TEST(CacheFile, RestoredSequenceContinuesBitForBit) {
    for (const std::string spec :
         {std::string("full"), std::string("snapkv:ratio=0.5"), std::string("h2o:budget=40"),
          std::string("streaming_llm:window=32,sinks=4"),
          "kvzap:model=" + test::model_path("kvzap/kvsieve-tiny-2k-linear") + ",tau=-4,window=32"})
        check_continuation(tiny2k(), spec);
}

TEST(CacheFile, KvpopStateIsSavedWithTheCache) {
    // The mLSTM memories, the queries awaiting their delayed readout and the pending scores travel with the file.
    check_continuation(tiny2k(),
                       "kvpop:model=" + test::model_path("kvpop/tiny2k-mlstm") + ",budget=96,window=32,sinks=4");
}

TEST(CacheFile, CompressedSequenceSavesSmall) {
    const auto tok = Tokenizer::from_gguf(tiny2k().file());
    test::TempFile full(".kvseq"), comp(".kvseq");
    for (auto [spec, path] :
         {std::pair<std::string, std::string>{"full", full.path()}, {"snapkv:ratio=0.75", comp.path()}}) {
        auto cache = make_cache(tiny2k(), spec);
        Session s(tiny2k(), *tok, *cache);
        std::vector<float> l;
        s.prefill(prompt_for(tiny2k()), PrefillPlan{}, l);
        save_sequence(path, tiny2k(), s, "");
    }
    const auto a = std::filesystem::file_size(full.path()), b = std::filesystem::file_size(comp.path());
    EXPECT_LT(b, 0.4 * a) << a << " vs " << b;
}

TEST(CacheFile, BadFilesAreOneClearError) {
    const auto tok = Tokenizer::from_gguf(tiny2k().file());
    test::TempFile file(".kvseq"), bad(".kvseq");
    auto cache = make_cache(tiny2k(), "h2o:budget=40");
    Session s(tiny2k(), *tok, *cache);
    std::vector<float> l;
    s.prefill(prompt_for(tiny2k()), PrefillPlan{}, l);
    save_sequence(file.path(), tiny2k(), s, "");
    const std::string data = slurp(file.path());
    expect_error_contains([&] { read_sequence(file.path(), test::stories260k()); }, "another model");
    spit(bad.path(), data.substr(0, data.size() / 2));
    expect_error_contains([&] { read_sequence(bad.path(), tiny2k()); }, "corrupted or truncated");
    std::string flipped = data;
    flipped[data.size() / 2] ^= 0x40;
    spit(bad.path(), flipped);
    expect_error_contains([&] { read_sequence(bad.path(), tiny2k()); }, "checksum");
    spit(bad.path(), "GGUF not a cache");
    expect_error_contains([&] { read_sequence(bad.path(), tiny2k()); }, "not a kvsieve cache file");
    expect_error_contains([&] { read_sequence("/nonexistent/x.kvseq", tiny2k()); }, "cannot read");
    const SavedSequence saved = read_sequence(file.path(), tiny2k());
    auto other = make_cache(tiny2k(), "h2o:budget=48");
    Session o(tiny2k(), *tok, *other);
    expect_error_contains([&] { restore_sequence(o, saved); }, "was saved under policy 'h2o:budget=40'");
    auto f32 = make_cache(tiny2k(), "h2o:budget=40", KVType::kF32);
    Session o2(tiny2k(), *tok, *f32);
    expect_error_contains(
        [&] { restore_sequence(o2, saved); },
        "holds keys of type f16 and values of type f16; this cache stores keys as f32 and values as f32");
    EXPECT_EQ(other->n_tokens(), 0);
}

}  // namespace
}  // namespace kvsieve
