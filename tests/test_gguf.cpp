// GGUF reader and writer: round trips, every metadata type, and the errors of malformed files.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "gguf_edit.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "kernels/quant.h"
#include "io/model_config.h"
#include "model/llama_model.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

std::vector<uint8_t> read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

/// Expects constructing T from path to throw Error whose message contains `needle`.
template <class T>
void expect_error(const std::string& path, const std::string& needle) {
    SCOPED_TRACE(path);
    test::expect_error_contains([&] { T x(path); }, needle);
}

TEST(GGUF, ReadsBundledModel) {
    GGUFFile f(test::model_path("stories260K.gguf"));
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.tensors().size(), 48u);
    EXPECT_EQ(f.metadata().size(), 19u);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_int("llama.context_length"), 512);
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 512u);
    const GGUFTensorInfo* t = f.find_tensor("blk.0.ffn_down.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->ne[0], 172);
    EXPECT_EQ(t->ne[1], 64);
    EXPECT_EQ(t->nbytes, 172u * 64 * 4);
    EXPECT_EQ((t->data - f.tensors()[0].data) % 32, 0);
}

TEST(GGUF, ModelConfigWritesWhatItReads) {
    // Every shape key to_gguf writes must come back through from_gguf (the trainer and synth both save models
    // this way), including a linear RoPE scaling and a head size that is not D / H_q.
    ModelConfig c;
    c.arch_name = "qwen3";
    c.n_layer = 3;
    c.n_embd = 96;
    c.n_head = 6;
    c.n_head_kv = 2;
    c.head_dim = 32;
    c.n_rot = 16;
    c.n_ff = 200;
    c.n_ctx_train = 4096;
    c.rope_base = 500000.0f;
    c.rms_eps = 1e-6f;
    c.rope_linear_scale = 0.25f;
    test::TempFile tmp(".gguf");
    GGUFWriter w;
    c.to_gguf(w);
    w.set("tokenizer.ggml.tokens",
          GGUFValue::make_array(GGUFValueType::STRING, {GGUFValue::make_string("a"), GGUFValue::make_string("b")}));
    w.write(tmp.path());
    const ModelConfig r = ModelConfig::from_gguf(GGUFFile(tmp.path()));
    EXPECT_EQ(r.arch, Arch::kQwen3);
    EXPECT_EQ(r.arch_name, "qwen3");
    EXPECT_EQ(r.n_layer, 3);
    EXPECT_EQ(r.n_embd, 96);
    EXPECT_EQ(r.n_head, 6);
    EXPECT_EQ(r.n_head_kv, 2);
    EXPECT_EQ(r.head_dim, 32);
    EXPECT_EQ(r.n_rot, 16);
    EXPECT_EQ(r.n_ff, 200);
    EXPECT_EQ(r.n_ctx_train, 4096);
    EXPECT_FLOAT_EQ(r.rope_base, 500000.0f);
    EXPECT_FLOAT_EQ(r.rms_eps, 1e-6f);
    EXPECT_FLOAT_EQ(r.rope_linear_scale, 0.25f);
    EXPECT_TRUE(r.qk_norm);
    EXPECT_EQ(r.n_vocab, 2);
}

TEST(GGUF, RoundTripOfEveryValueType) {
    test::TempFile tmp(".gguf");
    GGUFWriter w;
    GGUFValue v;
    v.type = GGUFValueType::UINT8;
    v.u = 200;
    w.set("u8", v);
    v = {};
    v.type = GGUFValueType::INT8;
    v.i = -100;
    w.set("i8", v);
    v = {};
    v.type = GGUFValueType::UINT16;
    v.u = 60000;
    w.set("u16", v);
    v = {};
    v.type = GGUFValueType::INT16;
    v.i = -30000;
    w.set("i16", v);
    w.set_u32("u32", 4000000000u);
    w.set("i32", GGUFValue::make_i32(-2000000000));
    w.set_f32("f32", 0.5f);
    w.set_bool("bool", true);
    w.set_string("str", "héllo ▁");
    v = {};
    v.type = GGUFValueType::UINT64;
    v.u = 1ull << 60;
    w.set("u64", v);
    v = {};
    v.type = GGUFValueType::INT64;
    v.i = -(1ll << 60);
    w.set("i64", v);
    v = {};
    v.type = GGUFValueType::FLOAT64;
    v.f = 1e-300;
    w.set("f64", v);
    w.set("arr", GGUFValue::make_array(GGUFValueType::INT32, {GGUFValue::make_i32(1), GGUFValue::make_i32(-2)}));
    w.set("sarr",
          GGUFValue::make_array(GGUFValueType::STRING, {GGUFValue::make_string("a"), GGUFValue::make_string("")}));
    std::vector<float> a(64 * 3);
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.01f * static_cast<float>(i) - 0.7f;
    std::vector<BlockQ8_0> q(a.size() / 32);
    quantize_row_q8_0(a.data(), q.data(), static_cast<int64_t>(a.size()));
    w.add_tensor_ref("a", 0, {64, 3}, a.data(), a.size() * 4);
    w.add_tensor_ref("q", 8, {64, 3}, q.data(), q.size() * sizeof(BlockQ8_0));
    w.write(tmp.path());

    GGUFFile f(tmp.path());
    EXPECT_EQ(f.get_int("u8"), 200);
    EXPECT_EQ(f.get_int("i8"), -100);
    EXPECT_EQ(f.get_int("u16"), 60000);
    EXPECT_EQ(f.get_int("i16"), -30000);
    EXPECT_EQ(f.get_int("u32"), 4000000000ll);
    EXPECT_EQ(f.get_int("i32"), -2000000000);
    EXPECT_EQ(f.get_float("f32", 0), 0.5);
    EXPECT_TRUE(f.get_bool("bool", false));
    EXPECT_EQ(f.get_string("str"), "héllo ▁");
    EXPECT_EQ(f.find("u64")->u, 1ull << 60);
    EXPECT_EQ(f.get_int("i64"), -(1ll << 60));
    EXPECT_EQ(f.get_float("f64", 0), 1e-300);
    EXPECT_EQ(f.get_int_array("arr"), (std::vector<int32_t>{1, -2}));
    EXPECT_EQ(f.get_string_array("sarr"), (std::vector<std::string>{"a", ""}));
    const auto* ta = f.find_tensor("a");
    const auto* tq = f.find_tensor("q");
    ASSERT_TRUE(ta && tq);
    EXPECT_EQ(std::memcmp(ta->data, a.data(), a.size() * 4), 0);
    EXPECT_EQ(std::memcmp(tq->data, q.data(), q.size() * sizeof(BlockQ8_0)), 0);
    EXPECT_EQ(tq->offset % 32, 0u);
    EXPECT_THROW(f.get_string("u32"), Error);
    EXPECT_THROW(f.get_int("missing"), Error);
}

TEST(GGUF, RewriteIsLossless) {
    test::TempFile tmp(".gguf");
    test::rewrite_gguf(test::model_path("stories260K.gguf"), tmp.path(), {});
    EXPECT_EQ(read_bytes(tmp.path()), read_bytes(test::model_path("stories260K.gguf")));
}

TEST(GGUF, TruncatedFilesAreReported) {
    const auto bytes = read_bytes(test::model_path("tiny-qwen3-q8_0.gguf"));
    test::TempFile tmp(".gguf");
    for (size_t cut : {size_t{3}, size_t{30}, size_t{200}, size_t{9000}, bytes.size() / 2, bytes.size() - 1}) {
        write_bytes(tmp.path(), std::vector<uint8_t>(bytes.begin(), bytes.begin() + cut));
        try {
            GGUFFile f(tmp.path());
            ADD_FAILURE() << "no error at cut " << cut;
        } catch (const Error& e) {
            const std::string m = e.what();
            EXPECT_TRUE(m.find("truncated") != std::string::npos || m.find("too short") != std::string::npos ||
                        m.find("exceeds") != std::string::npos)
                << "cut " << cut << ": " << m;
        }
    }
}

TEST(GGUF, CorruptHeadersAreReported) {
    const auto good = read_bytes(test::model_path("tiny-llama-f32.gguf"));
    test::TempFile tmp(".gguf");
    auto patched = [&](size_t off, const void* v, size_t n) {
        auto b = good;
        std::memcpy(b.data() + off, v, n);
        write_bytes(tmp.path(), b);
    };
    patched(0, "GGUX", 4);
    expect_error<GGUFFile>(tmp.path(), "bad magic");
    const uint32_t v1 = 1, v9 = 9;
    patched(4, &v1, 4);
    expect_error<GGUFFile>(tmp.path(), "unsupported GGUF version 1");
    patched(4, &v9, 4);
    expect_error<GGUFFile>(tmp.path(), "unsupported GGUF version 9");
    const uint64_t huge = 1ull << 50;
    patched(8, &huge, 8);
    expect_error<GGUFFile>(tmp.path(), "more than");
    write_bytes(tmp.path(), {});
    expect_error<GGUFFile>(tmp.path(), "too short");
    expect_error<GGUFFile>("/nonexistent/model.gguf", "cannot open");
}

TEST(GGUF, UnknownTensorTypeIsReported) {
    // Patch the type field of the first tensor info to an id ggml does not define.
    GGUFFile f(test::model_path("tiny-llama-f32.gguf"));
    auto b = read_bytes(test::model_path("tiny-llama-f32.gguf"));
    const std::string name = f.tensors()[0].name;
    auto it = std::search(b.begin(), b.end(), name.begin(), name.end());
    ASSERT_NE(it, b.end());
    const size_t type_off = static_cast<size_t>(it - b.begin()) + name.size() + 4 + 8 * f.tensors()[0].n_dims;
    const uint32_t bad = 99;
    std::memcpy(b.data() + type_off, &bad, 4);
    test::TempFile tmp(".gguf");
    write_bytes(tmp.path(), b);
    expect_error<GGUFFile>(tmp.path(), "unknown tensor type 99");
}

TEST(GGUF, DimensionsWhoseProductOverflowAreReported) {
    // Each dimension within the reader's limit (2^40), the product beyond 64 bits (a fuzzer's find).
    GGUFFile f(test::model_path("tiny-llama-f32.gguf"));
    const GGUFTensorInfo* t = nullptr;
    for (const auto& ti : f.tensors())
        if (ti.n_dims == 2) t = &ti;
    ASSERT_NE(t, nullptr);
    auto b = read_bytes(test::model_path("tiny-llama-f32.gguf"));
    auto it = std::search(b.begin(), b.end(), t->name.begin(), t->name.end());
    ASSERT_NE(it, b.end());
    const size_t dims_off = static_cast<size_t>(it - b.begin()) + t->name.size() + 4;
    const uint64_t big = 1ull << 36;
    std::memcpy(b.data() + dims_off, &big, 8);
    std::memcpy(b.data() + dims_off + 8, &big, 8);
    test::TempFile tmp(".gguf");
    write_bytes(tmp.path(), b);
    expect_error<GGUFFile>(tmp.path(), "is too large");
}

TEST(ModelLoad, MissingTensorWrongShapeUnknownArchUnsupportedType) {
    const std::string src = test::model_path("tiny-qwen3-f32.gguf");
    test::TempFile tmp(".gguf");
    {
        test::GGUFEdit e;
        e.keep_tensor = [](const std::string& n) { return n != "blk.1.attn_k_norm.weight"; };
        test::rewrite_gguf(src, tmp.path(), e);
        expect_error<LlamaModel>(tmp.path(), "missing tensor 'blk.1.attn_k_norm.weight'");
    }
    {
        test::GGUFEdit e;
        e.retype = [](const std::string& n, uint32_t&, std::vector<int64_t>& ne) {
            if (n != "blk.0.attn_q.weight") return false;
            ne = {256, 128};
            return true;
        };
        test::rewrite_gguf(src, tmp.path(), e);
        expect_error<LlamaModel>(tmp.path(), "tensor 'blk.0.attn_q.weight' has shape [256, 128], expected [256, 256]");
    }
    {
        test::GGUFEdit e;
        e.edit_kv = [](const std::string& k, GGUFValue& v) {
            if (k == "general.architecture") v.s = "mamba";
            return true;
        };
        test::rewrite_gguf(src, tmp.path(), e);
        expect_error<LlamaModel>(tmp.path(), "unknown architecture 'mamba'");
    }
    {
        test::GGUFEdit e;
        e.retype = [](const std::string& n, uint32_t& type, std::vector<int64_t>&) {
            if (n != "blk.0.ffn_up.weight") return false;
            type = 20;  // IQ4_NL: a real ggml type kvsieve does not compute with
            return true;
        };
        test::rewrite_gguf(src, tmp.path(), e);
        expect_error<LlamaModel>(tmp.path(), "has type IQ4_NL");
    }
    {
        test::GGUFEdit e;
        e.edit_kv = [](const std::string& k, GGUFValue&) { return k != "qwen3.block_count"; };
        test::rewrite_gguf(src, tmp.path(), e);
        expect_error<LlamaModel>(tmp.path(), "missing metadata key 'qwen3.block_count'");
    }
}

}  // namespace
}  // namespace kvsieve
