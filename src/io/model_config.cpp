#include "io/model_config.h"

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "util/error.h"

namespace kvsieve {

ModelConfig ModelConfig::from_gguf(const GGUFFile& f) {
    ModelConfig c;
    c.path = f.path();
    c.arch_name = f.get_string("general.architecture");
    const std::string& a = c.arch_name;
    if (a == "llama" || a == "mistral") {
        c.arch = Arch::kLlama;
        c.rope_layout = RopeLayout::kNormal;
    } else if (a == "qwen2") {
        c.arch = Arch::kQwen2;
        c.rope_layout = RopeLayout::kNeox;
        c.qkv_bias = true;
    } else if (a == "qwen3") {
        c.arch = Arch::kQwen3;
        c.rope_layout = RopeLayout::kNeox;
        c.qk_norm = true;
    } else {
        fail(f.path(), ": unknown architecture '", a, "' (kvsieve runs llama, mistral, qwen2, qwen3)");
    }
    auto key = [&](const char* k) { return a + "." + k; };
    auto positive = [&](const char* k, int64_t v) {
        require(v > 0 && v < (int64_t{1} << 31), f.path(), ": ", key(k), " = ", v, " is not a valid size");
        return static_cast<int>(v);
    };
    c.n_layer = positive("block_count", f.get_int(key("block_count")));
    c.n_embd = positive("embedding_length", f.get_int(key("embedding_length")));
    c.n_head = positive("attention.head_count", f.get_int(key("attention.head_count")));
    c.n_head_kv = positive("attention.head_count_kv", f.get_int(key("attention.head_count_kv"), c.n_head));
    c.n_ff = positive("feed_forward_length", f.get_int(key("feed_forward_length")));
    c.n_ctx_train = positive("context_length", f.get_int(key("context_length"), 2048));
    require(c.n_head % c.n_head_kv == 0, f.path(), ": head_count ", c.n_head, " is not a multiple of head_count_kv ",
            c.n_head_kv);
    const int64_t default_hd = c.n_embd / c.n_head;
    c.head_dim = positive("attention.key_length", f.get_int(key("attention.key_length"), default_hd));
    const int64_t vlen = f.get_int(key("attention.value_length"), c.head_dim);
    require(vlen == c.head_dim, f.path(), ": value_length ", vlen, " differs from key_length ", c.head_dim,
            " (not supported)");
    c.n_rot = positive("rope.dimension_count", f.get_int(key("rope.dimension_count"), c.head_dim));
    require(c.n_rot <= c.head_dim && c.n_rot % 2 == 0, f.path(), ": rope.dimension_count ", c.n_rot,
            " must be even and at most the head dimension ", c.head_dim);
    c.rms_eps = static_cast<float>(f.get_float(key("attention.layer_norm_rms_epsilon"), 1e-5));
    c.rope_base = static_cast<float>(f.get_float(key("rope.freq_base"), 10000.0));
    require(c.rope_base > 0, f.path(), ": rope.freq_base must be positive");
    const std::string scaling = f.get_string(key("rope.scaling.type"), "none");
    if (scaling == "linear") {
        const double factor = f.get_float(key("rope.scaling.factor"), 1.0);
        require(factor > 0, f.path(), ": rope.scaling.factor must be positive");
        c.rope_linear_scale = static_cast<float>(1.0 / factor);
    } else if (scaling != "none" && scaling != "llama3") {
        fail(f.path(), ": rope scaling type '", scaling, "' is not supported (none, linear, llama3)");
    }
    // Vocabulary size: from the token list when present, else from the embedding tensor.
    if (f.has("tokenizer.ggml.tokens")) {
        c.n_vocab = static_cast<int>(f.find("tokenizer.ggml.tokens")->array.size());
    } else if (const auto* t = f.find_tensor("token_embd.weight")) {
        c.n_vocab = static_cast<int>(t->ne[1]);
    }
    c.n_vocab = static_cast<int>(f.get_int(key("vocab_size"), c.n_vocab));
    require(c.n_vocab > 0, f.path(), ": vocabulary size unknown");
    return c;
}

void ModelConfig::to_gguf(GGUFWriter& w) const {
    const std::string a = arch_name.empty() ? "llama" : arch_name;
    w.set_string("general.architecture", a);
    w.set_u32(a + ".context_length", static_cast<uint32_t>(n_ctx_train));
    w.set_u32(a + ".embedding_length", n_embd);
    w.set_u32(a + ".block_count", n_layer);
    w.set_u32(a + ".feed_forward_length", n_ff);
    w.set_u32(a + ".attention.head_count", n_head);
    w.set_u32(a + ".attention.head_count_kv", n_head_kv);
    w.set_u32(a + ".attention.key_length", head_dim);
    w.set_u32(a + ".attention.value_length", head_dim);
    w.set_u32(a + ".rope.dimension_count", n_rot > 0 ? n_rot : head_dim);
    w.set_f32(a + ".rope.freq_base", rope_base);
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", rms_eps);
    if (rope_linear_scale != 1.0f) {
        w.set_string(a + ".rope.scaling.type", "linear");
        w.set_f32(a + ".rope.scaling.factor", 1.0f / rope_linear_scale);
    }
}

std::string ModelConfig::summary() const {
    return cat(arch_name, ": L=", n_layer, " D=", n_embd, " Hq=", n_head, " Hkv=", n_head_kv, " d=", head_dim,
               " ff=", n_ff, " vocab=", n_vocab, " ctx=", n_ctx_train);
}

}  // namespace kvsieve
