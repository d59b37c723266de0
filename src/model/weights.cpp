#include "model/weights.h"

#include "io/gguf.h"
#include "kernels/dot.h"
#include "kernels/quant.h"
#include "util/error.h"

namespace kvsieve {
namespace {

std::string shape_str(std::initializer_list<int64_t> ne) {
    std::string s = "[";
    bool first = true;
    for (int64_t d : ne) {
        s += (first ? "" : ", ") + std::to_string(d);
        first = false;
    }
    return s + "]";
}

const GGUFTensorInfo& get(const GGUFFile& f, const std::string& name, std::initializer_list<int64_t> ne) {
    const GGUFTensorInfo* t = f.find_tensor(name);
    if (!t) fail(f.path(), ": missing tensor '", name, "'");
    bool ok = t->n_dims == ne.size();
    size_t i = 0;
    for (int64_t d : ne) ok = ok && t->ne[i++] == d;
    if (!ok) fail(f.path(), ": tensor '", name, "' has shape ", t->shape_str(), ", expected ", shape_str(ne));
    if (!is_supported_type(t->type))
        fail(f.path(), ": tensor '", name, "' has type ", type_name(t->type), ", which kvsieve cannot compute with");
    return *t;
}

WeightMatrix matrix(const GGUFFile& f, const std::string& name, int64_t rows, int64_t cols, ModelWeights& w) {
    const GGUFTensorInfo& t = get(f, name, {cols, rows});
    WeightMatrix m;
    m.type = static_cast<TensorType>(t.type);
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = row_bytes(m.type, cols);
    m.data = t.data;
    m.name = name;
    if (m.type == TensorType::Q8_0 && dot_kernels().split_q8_0) {
        auto buf = std::make_shared<AlignedBuffer>();
        m = repack_q8_0_split(m, *buf);
        w.owned.push_back(std::move(buf));
        // The copy is what the kernels read: the mapped original need not stay resident beside it.
        f.release(t.data, static_cast<uint64_t>(rows) * row_bytes(TensorType::Q8_0, cols));
    }
    return m;
}

std::vector<float> vec(const GGUFFile& f, const std::string& name, int64_t n) {
    const GGUFTensorInfo& t = get(f, name, {n});
    std::vector<float> v(n);
    dequantize_row(static_cast<TensorType>(t.type), t.data, v.data(), n);
    return v;
}

}  // namespace

ModelWeights ModelWeights::from_gguf(const GGUFFile& f, const ModelConfig& c) {
    ModelWeights w;
    const int64_t D = c.n_embd, q_dim = int64_t(c.n_head) * c.head_dim, kv_dim = int64_t(c.n_head_kv) * c.head_dim;
    w.tok_embd = matrix(f, "token_embd.weight", c.n_vocab, D, w);
    w.output_norm = vec(f, "output_norm.weight", D);
    if (f.find_tensor("output.weight")) {
        w.output = matrix(f, "output.weight", c.n_vocab, D, w);
    } else {
        w.output = w.tok_embd;
        w.tied_output = true;
    }
    if (f.find_tensor("rope_freqs.weight")) w.rope_freqs = vec(f, "rope_freqs.weight", c.n_rot / 2);
    w.layers.resize(c.n_layer);
    for (int l = 0; l < c.n_layer; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        LayerWeights& L = w.layers[l];
        L.attn_norm = vec(f, p + "attn_norm.weight", D);
        L.ffn_norm = vec(f, p + "ffn_norm.weight", D);
        L.wq = matrix(f, p + "attn_q.weight", q_dim, D, w);
        L.wk = matrix(f, p + "attn_k.weight", kv_dim, D, w);
        L.wv = matrix(f, p + "attn_v.weight", kv_dim, D, w);
        L.wo = matrix(f, p + "attn_output.weight", D, q_dim, w);
        if (c.qkv_bias) {
            L.bq = vec(f, p + "attn_q.bias", q_dim);
            L.bk = vec(f, p + "attn_k.bias", kv_dim);
            L.bv = vec(f, p + "attn_v.bias", kv_dim);
        }
        if (c.qk_norm) {
            L.q_norm = vec(f, p + "attn_q_norm.weight", c.head_dim);
            L.k_norm = vec(f, p + "attn_k_norm.weight", c.head_dim);
        }
        L.w_gate = matrix(f, p + "ffn_gate.weight", c.n_ff, D, w);
        L.w_up = matrix(f, p + "ffn_up.weight", c.n_ff, D, w);
        L.w_down = matrix(f, p + "ffn_down.weight", D, c.n_ff, w);
    }
    return w;
}

}  // namespace kvsieve
