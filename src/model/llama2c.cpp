#include "model/llama2c.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "io/gguf_writer.h"
#include "text/vocab.h"
#include "util/error.h"

namespace kvsieve {

namespace {
std::vector<uint8_t> read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open '", path, "'");
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

GGUFValue arr_str(const std::vector<std::string>& v) {
    std::vector<GGUFValue> a;
    a.reserve(v.size());
    for (const auto& s : v) a.push_back(GGUFValue::make_string(s));
    return GGUFValue::make_array(GGUFValueType::STRING, std::move(a));
}
}  // namespace

// Longer than ~80 lines on purpose: the checkpoint's tensors are read in the file's fixed order, one after another.
void convert_llama2c(const std::string& checkpoint, const std::string& tokenizer, const std::string& out_gguf) {
    const std::vector<uint8_t> ck = read_all(checkpoint);
    require(ck.size() >= 28, checkpoint, ": too short for a llama2.c header");
    int32_t h[7];
    std::memcpy(h, ck.data(), sizeof h);
    const int64_t dim = h[0], hidden = h[1], L = h[2], n_heads = h[3], n_kv = h[4], seq_len = h[6];
    const bool shared = h[5] > 0;
    const int64_t vocab = shared ? h[5] : -static_cast<int64_t>(h[5]);
    require(dim > 0 && hidden > 0 && L > 0 && n_heads > 0 && n_kv > 0 && vocab > 0 && seq_len > 0 &&
                dim % n_heads == 0 && n_heads % n_kv == 0 && dim < (1 << 16) && hidden < (1 << 18) && L < 1024,
            checkpoint, ": implausible llama2.c header (dim ", dim, ", hidden ", hidden, ", layers ", L, ", heads ",
            n_heads, "/", n_kv, ", vocab ", h[5], ", seq_len ", seq_len, ")");
    const int64_t head_dim = dim / n_heads, kv_dim = n_kv * head_dim;
    const int64_t n_floats = vocab * dim + L * dim + L * dim * dim + 2 * L * kv_dim * dim + L * dim * dim + L * dim +
                             3 * L * hidden * dim + dim + seq_len * head_dim + (shared ? 0 : vocab * dim);
    require(static_cast<int64_t>(ck.size()) == 28 + 4 * n_floats, checkpoint, ": size ", ck.size(),
            " bytes does not match its header (expected ", 28 + 4 * n_floats, ")");
    const float* p = reinterpret_cast<const float*>(ck.data() + 28);
    const float* emb = p;
    p += vocab * dim;
    const float* rms_att = p;
    p += L * dim;
    const float* wq = p;
    p += L * dim * dim;
    const float* wk = p;
    p += L * kv_dim * dim;
    const float* wv = p;
    p += L * kv_dim * dim;
    const float* wo = p;
    p += L * dim * dim;
    const float* rms_ffn = p;
    p += L * dim;
    const float* w1 = p;
    p += L * hidden * dim;
    const float* w2 = p;
    p += L * dim * hidden;
    const float* w3 = p;
    p += L * hidden * dim;
    const float* rms_final = p;
    p += dim;
    p += seq_len * head_dim;  // freq_cis_real, freq_cis_imag (unused: RoPE is recomputed)
    const float* wcls = shared ? emb : p;

    // Tokenizer.
    const std::vector<uint8_t> tk = read_all(tokenizer);
    size_t off = 4;
    require(tk.size() >= 4, tokenizer, ": too short for a llama2.c tokenizer");
    std::vector<std::string> tokens;
    std::vector<GGUFValue> scores, types;
    for (int64_t i = 0; i < vocab; ++i) {
        require(off + 8 <= tk.size(), tokenizer, ": truncated at token ", i, " of ", vocab);
        float score;
        int32_t len;
        std::memcpy(&score, tk.data() + off, 4);
        std::memcpy(&len, tk.data() + off + 4, 4);
        off += 8;
        require(len >= 0 && off + len <= tk.size(), tokenizer, ": bad length ", len, " of token ", i);
        std::string t(reinterpret_cast<const char*>(tk.data() + off), len);
        off += len;
        TokenType type = TokenType::kNormal;
        if (i == 0) {
            t = "<unk>";
            type = TokenType::kUnknown;
        } else if (i == 1 || i == 2) {
            t = i == 1 ? "<s>" : "</s>";
            type = TokenType::kControl;
        } else if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
            type = TokenType::kByte;
        } else {
            std::string r;
            for (char c : t) r += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
            t = r;
        }
        tokens.push_back(t);
        scores.push_back(GGUFValue::make_f32(score));
        types.push_back(GGUFValue::make_i32(static_cast<int32_t>(type)));
    }

    GGUFWriter w;
    w.set_string("general.architecture", "llama");
    w.set("tokenizer.ggml.tokens", arr_str(tokens));
    w.set("tokenizer.ggml.scores", GGUFValue::make_array(GGUFValueType::FLOAT32, std::move(scores)));
    w.set("tokenizer.ggml.token_type", GGUFValue::make_array(GGUFValueType::INT32, std::move(types)));
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string("general.name", "llama");
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.seperator_token_id", 0xFFFFFFFFu);
    w.set_u32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
    w.set_u32("llama.context_length", static_cast<uint32_t>(seq_len));
    w.set_u32("llama.embedding_length", static_cast<uint32_t>(dim));
    w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(hidden));
    w.set_u32("llama.attention.head_count", static_cast<uint32_t>(n_heads));
    w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(n_kv));
    w.set_u32("llama.block_count", static_cast<uint32_t>(L));
    w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(head_dim));
    w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);

    auto add = [&](const std::string& name, std::vector<int64_t> ne, const float* data) {
        uint64_t n = 1;
        for (int64_t d : ne) n *= d;
        w.add_tensor_ref(name, 0, std::move(ne), data, n * 4);
    };
    add("token_embd.weight", {dim, vocab}, emb);
    add("output_norm.weight", {dim}, rms_final);
    add("output.weight", {dim, vocab}, wcls);
    for (int64_t l = 0; l < L; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        add(b + "attn_q.weight", {dim, dim}, wq + l * dim * dim);
        add(b + "attn_k.weight", {dim, kv_dim}, wk + l * kv_dim * dim);
        add(b + "attn_v.weight", {dim, kv_dim}, wv + l * kv_dim * dim);
        add(b + "attn_output.weight", {dim, dim}, wo + l * dim * dim);
        add(b + "attn_norm.weight", {dim}, rms_att + l * dim);
        add(b + "ffn_gate.weight", {dim, hidden}, w1 + l * hidden * dim);
        add(b + "ffn_down.weight", {hidden, dim}, w2 + l * dim * hidden);
        add(b + "ffn_up.weight", {dim, hidden}, w3 + l * hidden * dim);
        add(b + "ffn_norm.weight", {dim}, rms_ffn + l * dim);
    }
    w.write(out_gguf);
}

}  // namespace kvsieve
