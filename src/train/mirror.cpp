#include "train/mirror.h"

#include <algorithm>
#include <cmath>

#include "io/gguf_writer.h"
#include "kernels/quant.h"
#include "kernels/tensor_types.h"
#include "util/error.h"

namespace kvsieve::train {

namespace {
std::string param_name(const std::string& gguf) {
    std::string s = gguf;
    for (char& ch : s)
        if (ch == '.') ch = '_';
    return s;
}

/// Brings a hook tensor [B|1, H, Tq|1, Tk] to the grouped layout [B|1, Hkv, G|1, Tq|1, Tk].
torch::Tensor to_group(const torch::Tensor& t, int hq, int hkv, const char* what) {
    require(t.dim() == 4, what, " must have 4 dimensions [B, H, T_q, T_k], got ", t.dim());
    const int64_t h = t.size(1);
    if (h == 1) return t.unsqueeze(2);
    if (h == hkv) return t.unsqueeze(2);
    require(h == hq, what, " has ", h, " heads; expected 1, ", hkv, " (KV heads) or ", hq, " (query heads)");
    return t.reshape({t.size(0), hkv, hq / hkv, t.size(2), t.size(3)});
}
}  // namespace

LlamaMirrorImpl::LlamaMirrorImpl(const ModelConfig& c, bool tied_output) : c_(c), tied_(tied_output) {
    require(c.n_layer > 0 && c.n_embd > 0 && c.n_head > 0 && c.n_head_kv > 0 && c.n_head % c.n_head_kv == 0,
            "invalid model shape: ", c.summary());
    const int64_t D = c.n_embd, qd = int64_t(c.n_head) * c.head_dim, kvd = int64_t(c.n_head_kv) * c.head_dim;
    const double out_std = 0.02 / std::sqrt(2.0 * c.n_layer);
    auto reg = [&](const std::string& name, torch::Tensor t) {
        t = register_parameter(param_name(name), t);
        named_.emplace_back(name, t);
        return t;
    };
    auto normal = [](std::vector<int64_t> shape, double std) { return torch::randn(shape) * std; };
    tok_embd_ = reg("token_embd.weight", normal({c.n_vocab, D}, 0.02));
    output_norm_ = reg("output_norm.weight", torch::ones({D}));
    if (!tied_) output_ = reg("output.weight", normal({c.n_vocab, D}, 0.02));
    for (int l = 0; l < c.n_layer; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        Layer L;
        L.attn_norm = reg(p + "attn_norm.weight", torch::ones({D}));
        L.wq = reg(p + "attn_q.weight", normal({qd, D}, 0.02));
        L.wk = reg(p + "attn_k.weight", normal({kvd, D}, 0.02));
        L.wv = reg(p + "attn_v.weight", normal({kvd, D}, 0.02));
        if (c.qkv_bias) {
            L.bq = reg(p + "attn_q.bias", torch::zeros({qd}));
            L.bk = reg(p + "attn_k.bias", torch::zeros({kvd}));
            L.bv = reg(p + "attn_v.bias", torch::zeros({kvd}));
        }
        if (c.qk_norm) {
            L.q_norm = reg(p + "attn_q_norm.weight", torch::ones({c.head_dim}));
            L.k_norm = reg(p + "attn_k_norm.weight", torch::ones({c.head_dim}));
        }
        L.wo = reg(p + "attn_output.weight", normal({D, qd}, out_std));
        L.ffn_norm = reg(p + "ffn_norm.weight", torch::ones({D}));
        L.w_gate = reg(p + "ffn_gate.weight", normal({c.n_ff, D}, 0.02));
        L.w_up = reg(p + "ffn_up.weight", normal({c.n_ff, D}, 0.02));
        L.w_down = reg(p + "ffn_down.weight", normal({D, c.n_ff}, out_std));
        layers_.push_back(L);
    }
    // RoPE inverse frequencies (RoFormer eq. 34), as model/rope.cpp computes them.
    const int half = c.n_rot / 2;
    std::vector<double> inv(half);
    for (int i = 0; i < half; ++i) inv[i] = std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.n_rot);
    rope_freqs_ = torch::from_blob(inv.data(), {half}, torch::kFloat64).clone();
}

int64_t LlamaMirrorImpl::n_params() const {
    int64_t n = 0;
    for (const auto& p : parameters()) n += p.numel();
    return n;
}

std::vector<std::pair<std::string, torch::Tensor>> LlamaMirrorImpl::gguf_tensors() const { return named_; }

torch::Tensor LlamaMirrorImpl::rms(const torch::Tensor& x, const torch::Tensor& w) const {
    return x * torch::rsqrt(x.pow(2).mean(-1, true) + c_.rms_eps) * w;
}

torch::Tensor LlamaMirrorImpl::rope(const torch::Tensor& x, int64_t pos0) const {
    const int64_t T = x.size(2), half = c_.n_rot / 2;
    auto pos = (torch::arange(pos0, pos0 + T, torch::kFloat64) * static_cast<double>(c_.rope_linear_scale));
    auto ang = torch::outer(pos, rope_freqs_);  // [T, half], double as the engine computes it
    auto cs = torch::cos(ang).to(torch::kFloat32), sn = torch::sin(ang).to(torch::kFloat32);
    auto xr = x.narrow(-1, 0, c_.n_rot);
    torch::Tensor a, b;
    if (c_.rope_layout == RopeLayout::kNormal) {
        auto p = xr.reshape({x.size(0), x.size(1), T, half, 2});
        a = p.select(-1, 0);
        b = p.select(-1, 1);
        auto ra = a * cs - b * sn, rb = a * sn + b * cs;
        xr = torch::stack({ra, rb}, -1).reshape({x.size(0), x.size(1), T, c_.n_rot});
    } else {
        a = xr.narrow(-1, 0, half);
        b = xr.narrow(-1, half, half);
        xr = torch::cat({a * cs - b * sn, a * sn + b * cs}, -1);
    }
    if (c_.n_rot == c_.head_dim) return xr;
    return torch::cat({xr, x.narrow(-1, c_.n_rot, c_.head_dim - c_.n_rot)}, -1);
}

torch::Tensor LlamaMirrorImpl::hidden(const torch::Tensor& tokens, const MirrorHooks& hooks, int64_t pos0) {
    require(tokens.dim() == 2, "tokens must be [B, T], got ", tokens.dim(), " dimensions");
    const int64_t B = tokens.size(0), T = tokens.size(1);
    const int hq = c_.n_head, hkv = c_.n_head_kv, G = hq / hkv, d = c_.head_dim;
    auto x = torch::embedding(tok_embd_, tokens);  // [B, T, D]
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    if (hooks.capture) hooks.capture->clear();
    const bool blocked = hooks.blocked || static_cast<bool>(hooks.key_gate) || static_cast<bool>(hooks.key_until);
    require(!blocked || (!hooks.attn_bias && !hooks.keep_mask),
            "the blocked (gated) attention path cannot be combined with attn_bias or keep_mask hooks");
    torch::Tensor causal, diag;  // [T, T] masks of the dense path only
    if (!blocked) {
        causal = torch::ones({T, T}, torch::kBool).tril();
        diag = torch::eye(T, torch::kBool);
    }
    for (int l = 0; l < c_.n_layer; ++l) {
        const Layer& L = layers_[l];
        auto h = rms(x, L.attn_norm);
        auto q = torch::linear(h, L.wq, L.bq).view({B, T, hq, d}).transpose(1, 2);
        auto k = torch::linear(h, L.wk, L.bk).view({B, T, hkv, d}).transpose(1, 2);
        auto v = torch::linear(h, L.wv, L.bv).view({B, T, hkv, d}).transpose(1, 2);
        if (c_.qk_norm) {
            q = rms(q, L.q_norm);
            k = rms(k, L.k_norm);
        }
        AttnTensors at{h, k, torch::Tensor(), v, torch::Tensor()};
        q = rope(q, pos0);
        k = rope(k, pos0);
        at.k_post = k;
        auto qg = q.reshape({B, hkv, G, T, d});
        torch::Tensor og;   // [B, Hkv, G, T, d]
        torch::Tensor lse;  // [B, Hkv, G, T], for a capture only
        if (blocked) {
            const torch::Tensor g = hooks.key_gate ? hooks.key_gate(l, at) : torch::Tensor();
            const torch::Tensor until = hooks.key_until ? hooks.key_until(l, at) : torch::Tensor();
            og = gated_attention(qg, k, v, g, hooks.gate_window, scale, hooks.attn_block, until,
                                 hooks.capture ? &lse : nullptr);
        } else {
            auto s = torch::matmul(qg, k.unsqueeze(2).transpose(-1, -2)) * scale;  // [B, Hkv, G, T, T]
            if (hooks.attn_bias) {
                auto b = hooks.attn_bias(l, at);
                if (b.defined()) s = s + to_group(b, hq, hkv, "attention bias");
            }
            torch::Tensor keep = causal;
            if (hooks.keep_mask) {
                auto m = hooks.keep_mask(l, at);
                if (m.defined()) keep = (to_group(m.to(torch::kBool), hq, hkv, "keep mask") & causal) | diag;
            }
            s = s.masked_fill(keep.logical_not(), -std::numeric_limits<float>::infinity());
            if (hooks.capture) lse = torch::logsumexp(s, -1);
            og = torch::matmul(torch::softmax(s, -1), v.unsqueeze(2));
        }
        if (hooks.capture) {
            at.lse = lse.reshape({B, hq, T});
            at.q_post = q;
            hooks.capture->push_back(at);
        }
        auto o = og.reshape({B, hq, T, d}).transpose(1, 2).reshape({B, T, hq * d});
        x = x + torch::linear(o, L.wo);
        auto h2 = rms(x, L.ffn_norm);
        x = x + torch::linear(torch::silu(torch::linear(h2, L.w_gate)) * torch::linear(h2, L.w_up), L.w_down);
    }
    return rms(x, output_norm_);
}

torch::Tensor LlamaMirrorImpl::forward(const torch::Tensor& tokens, const MirrorHooks& hooks, int64_t pos0) {
    return torch::matmul(hidden(tokens, hooks, pos0), (tied_ ? tok_embd_ : output_).t());
}

LlamaMirror load_mirror(const std::string& gguf_path) {
    GGUFFile f(gguf_path);
    const ModelConfig c = ModelConfig::from_gguf(f);
    const bool tied = f.find_tensor("output.weight") == nullptr;
    require(f.find_tensor("rope_freqs.weight") == nullptr, gguf_path,
            ": rope_freqs (Llama 3.1 scaling) is not supported by the trainer");
    LlamaMirror m(c, tied);
    torch::NoGradGuard ng;
    for (auto& [name, t] : m->gguf_tensors()) {
        const GGUFTensorInfo* ti = f.find_tensor(name);
        require(ti != nullptr, gguf_path, ": missing tensor '", name, "'");
        require(ti->n_elements() == t.numel(), gguf_path, ": tensor '", name, "' has ", ti->n_elements(),
                " elements, expected ", t.numel());
        const int64_t cols = ti->ne[0], rows = ti->n_elements() / cols;
        const TensorType ty = static_cast<TensorType>(ti->type);
        const size_t rb = row_bytes(ty, cols);
        std::vector<float> buf(static_cast<size_t>(ti->n_elements()));
        for (int64_t r = 0; r < rows; ++r) dequantize_row(ty, ti->data + r * rb, buf.data() + r * cols, cols);
        t.copy_(torch::from_blob(buf.data(), t.sizes(), torch::kFloat32));
    }
    return m;
}

GGUFMetadata tokenizer_metadata(const std::string& gguf_path) {
    GGUFFile f(gguf_path);
    GGUFMetadata out;
    for (const auto& [k, v] : f.metadata())
        if (k.rfind("tokenizer.", 0) == 0) out.emplace_back(k, v);
    require(!out.empty(), gguf_path, ": no tokenizer.* metadata to copy");
    return out;
}

GGUFMetadata tokenizer_metadata(const Vocab& v) {
    std::vector<GGUFValue> toks, scores, types;
    for (int32_t i = 0; i < v.size(); ++i) {
        toks.push_back(GGUFValue::make_string(v.tokens[i]));
        scores.push_back(GGUFValue::make_f32(i < static_cast<int32_t>(v.scores.size()) ? v.scores[i] : 0.0f));
        types.push_back(GGUFValue::make_i32(static_cast<int32_t>(v.types[i])));
    }
    GGUFMetadata out;
    out.emplace_back("tokenizer.ggml.model", GGUFValue::make_string(v.model));
    out.emplace_back("tokenizer.ggml.tokens", GGUFValue::make_array(GGUFValueType::STRING, std::move(toks)));
    out.emplace_back("tokenizer.ggml.scores", GGUFValue::make_array(GGUFValueType::FLOAT32, std::move(scores)));
    out.emplace_back("tokenizer.ggml.token_type", GGUFValue::make_array(GGUFValueType::INT32, std::move(types)));
    out.emplace_back("tokenizer.ggml.bos_token_id", GGUFValue::make_u32(static_cast<uint32_t>(v.bos)));
    out.emplace_back("tokenizer.ggml.eos_token_id", GGUFValue::make_u32(static_cast<uint32_t>(v.eos)));
    out.emplace_back("tokenizer.ggml.unknown_token_id", GGUFValue::make_u32(static_cast<uint32_t>(v.unk)));
    out.emplace_back("tokenizer.ggml.add_bos_token", GGUFValue::make_bool(v.add_bos));
    out.emplace_back("tokenizer.ggml.add_space_prefix", GGUFValue::make_bool(v.add_space_prefix));
    return out;
}

void save_mirror(LlamaMirror& m, const std::string& path, const GGUFMetadata& extra,
                 const std::map<std::string, torch::Tensor>& predictors) {
    const ModelConfig& c = m->config();
    GGUFWriter w;
    c.to_gguf(w);
    for (const auto& [k, v] : extra) w.set(k, v);
    std::vector<torch::Tensor> keep;  // contiguous copies that outlive write()
    for (const auto& [name, t] : m->gguf_tensors()) {
        auto ct = t.detach().to(torch::kFloat32).contiguous();
        keep.push_back(ct);
        std::vector<int64_t> ne(ct.sizes().rbegin(), ct.sizes().rend());
        w.add_tensor_ref(name, static_cast<uint32_t>(TensorType::F32), ne, ct.data_ptr<float>(),
                         static_cast<uint64_t>(ct.numel()) * 4);
    }
    const auto model_tensors = m->gguf_tensors();
    for (const auto& [name, t] : predictors) {
        const bool schema = name.rfind("blk.", 0) == 0 && std::count(name.begin(), name.end(), '.') >= 3;
        require(schema, "predictor tensor '", name, "' is not named blk.<layer>.<method>.<name>");
        for (const auto& [mn, mt] : model_tensors)
            require(mn != name, "predictor tensor '", name, "' is a model tensor");
        auto ct = t.detach().to(torch::kFloat32).contiguous();
        keep.push_back(ct);
        std::vector<int64_t> ne(ct.sizes().rbegin(), ct.sizes().rend());
        w.add_tensor_ref(name, static_cast<uint32_t>(TensorType::F32), ne, ct.data_ptr<float>(),
                         static_cast<uint64_t>(ct.numel()) * 4);
    }
    w.write(path);
}

}  // namespace kvsieve::train
