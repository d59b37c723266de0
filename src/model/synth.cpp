#include "model/synth.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "io/gguf_writer.h"
#include "kernels/quant.h"
#include "io/model_config.h"
#include "text/vocab.h"
#include "util/error.h"

namespace kvsieve {

const std::vector<SynthShape>& synth_shapes() {
    static const std::vector<SynthShape> s = {
        {"qwen3-0.6b", "qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 40960, 1e6f, true},
        {"qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1e6f, true},
        {"llama-3.2-1b", "llama", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 5e5f, true},
        {"tiny-qwen3", "qwen3", 2, 256, 8, 2, 32, 512, 1024, 4096, 1e6f, true},
    };
    return s;
}

const SynthShape& synth_shape(const std::string& name) {
    std::string names;
    for (const auto& s : synth_shapes()) {
        if (s.name == name) return s;
        names += (names.empty() ? "" : ", ") + s.name;
    }
    fail("unknown model shape '", name, "' (known: ", names, ")");
}

namespace {
/// splitmix64: a small counter-based generator, so each row has its own reproducible stream.
uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void random_row(uint64_t seed, float* x, int64_t n) {
    const float a = 0.02f * std::sqrt(3.0f);  // uniform(−a, a) has standard deviation 0.02
    uint64_t st = seed;
    for (int64_t i = 0; i < n; ++i) x[i] = a * (2.0f * static_cast<float>(splitmix(st) >> 40) / 16777216.0f - 1.0f);
}
}  // namespace

// Longer than ~80 lines on purpose: the model's metadata and tensors are written in GGUF order, one list.
void write_synth_model(const std::string& path, const SynthShape& s, TensorType type, uint64_t seed) {
    require(type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16 ||
                type == TensorType::Q8_0 || type == TensorType::Q4_0,
            "synth writes f32, f16, bf16, q8_0 or q4_0 weights, not ", type_name(type));
    GGUFWriter w;
    ModelConfig c;
    c.arch_name = s.arch;
    c.n_layer = s.n_layer;
    c.n_embd = s.n_embd;
    c.n_head = s.n_head;
    c.n_head_kv = s.n_head_kv;
    c.head_dim = c.n_rot = s.head_dim;
    c.n_ff = s.n_ff;
    c.n_ctx_train = s.n_ctx;
    c.rope_base = s.rope_base;
    c.rms_eps = 1e-6f;
    c.to_gguf(w);
    const std::string a = s.arch;
    w.set_string("general.name", s.name + "-random");
    w.set_string("general.description", cat("random weights (kvsieve synth, seed ", seed, ") for speed measurement"));
    std::vector<GGUFValue> toks, scores, types;
    auto add_tok = [&](const std::string& t, TokenType ty, float sc) {
        toks.push_back(GGUFValue::make_string(t));
        scores.push_back(GGUFValue::make_f32(sc));
        types.push_back(GGUFValue::make_i32(static_cast<int32_t>(ty)));
    };
    add_tok("<unk>", TokenType::kUnknown, 0);
    add_tok("<s>", TokenType::kControl, 0);
    add_tok("</s>", TokenType::kControl, 0);
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        add_tok(buf, TokenType::kByte, 0);
    }
    for (int i = static_cast<int>(toks.size()); i < s.n_vocab; ++i)
        add_tok(cat("<unused", i, ">"), TokenType::kUnused, 0);
    w.set("tokenizer.ggml.tokens", GGUFValue::make_array(GGUFValueType::STRING, std::move(toks)));
    w.set("tokenizer.ggml.scores", GGUFValue::make_array(GGUFValueType::FLOAT32, std::move(scores)));
    w.set("tokenizer.ggml.token_type", GGUFValue::make_array(GGUFValueType::INT32, std::move(types)));
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);

    uint64_t tensor_seed = seed * 0x100000001B3ull;
    auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
        const uint64_t ts = ++tensor_seed;
        const size_t rb = row_bytes(type, cols);
        w.add_tensor_gen(name, static_cast<uint32_t>(type), {cols, rows}, [=](uint8_t* out, uint64_t) {
#pragma omp parallel
            {
                std::vector<float> row(cols);
#pragma omp for schedule(static)
                for (int64_t r = 0; r < rows; ++r) {
                    random_row(ts * 1000003ull + static_cast<uint64_t>(r), row.data(), cols);
                    quantize_row(type, row.data(), out + r * rb, cols);
                }
            }
        });
    };
    auto ones = [&](const std::string& name, int64_t n) {
        w.add_tensor_gen(name, 0, {n}, [n](uint8_t* out, uint64_t) {
            for (int64_t i = 0; i < n; ++i) reinterpret_cast<float*>(out)[i] = 1.0f;
        });
    };
    auto zeros = [&](const std::string& name, int64_t n) {
        w.add_tensor_gen(name, 0, {n},
                         [n](uint8_t* out, uint64_t) { std::fill_n(reinterpret_cast<float*>(out), n, 0.0f); });
    };
    const int64_t D = s.n_embd, qd = int64_t(s.n_head) * s.head_dim, kvd = int64_t(s.n_head_kv) * s.head_dim;
    matrix("token_embd.weight", s.n_vocab, D);
    ones("output_norm.weight", D);
    if (!s.tied) matrix("output.weight", s.n_vocab, D);
    for (int l = 0; l < s.n_layer; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        ones(b + "attn_norm.weight", D);
        matrix(b + "attn_q.weight", qd, D);
        matrix(b + "attn_k.weight", kvd, D);
        matrix(b + "attn_v.weight", kvd, D);
        if (a == "qwen2") {
            zeros(b + "attn_q.bias", qd);
            zeros(b + "attn_k.bias", kvd);
            zeros(b + "attn_v.bias", kvd);
        }
        if (a == "qwen3") {
            ones(b + "attn_q_norm.weight", s.head_dim);
            ones(b + "attn_k_norm.weight", s.head_dim);
        }
        matrix(b + "attn_output.weight", D, qd);
        ones(b + "ffn_norm.weight", D);
        matrix(b + "ffn_gate.weight", s.n_ff, D);
        matrix(b + "ffn_up.weight", s.n_ff, D);
        matrix(b + "ffn_down.weight", D, s.n_ff);
    }
    w.write(path);
}

}  // namespace kvsieve
