#include "cache/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>

#include "util/error.h"

namespace kvsieve {

KVCache::KVCache(const ModelConfig& c, int64_t n_ctx, Policy policy, std::shared_ptr<KVPool> pool)
    : cfg_(c), n_ctx_(n_ctx), policy_(std::move(policy)), pool_(std::move(pool)), n_layer_(c.n_layer),
      n_head_kv_(c.n_head_kv) {
    require(n_ctx > 0, "context size must be positive, got ", n_ctx);
    require(pool_ && pool_->head_dim() == c.head_dim, "KV pool head dimension does not match the model");
    check_kv_head_dim(pool_->key_type(), c.head_dim);
    check_kv_head_dim(pool_->value_type(), c.head_dim);
    require(c.head_dim <= 256, "head dimension ", c.head_dim, " above 256 is not supported by the paged kernels");
    if (policy_.scorer) {
        policy_.scorer = policy_.scorer->for_model(c);
        policy_.scorer->adjust_policy(policy_);
        state_ = policy_.scorer->new_state(c);
        entry_ = policy_.scorer->entry();
        step_ = policy_.scorer->step();
    }
    held_.resize(static_cast<size_t>(n_layer_) * n_head_kv_);
    heads_.reserve(static_cast<size_t>(n_layer_) * n_head_kv_);
    for (int i = 0; i < n_layer_ * n_head_kv_; ++i) heads_.emplace_back(pool_.get(), policy_.sinks, policy_.window);
}

bool KVCache::admit(int layer, int head, int32_t pos, float& score, const PageStore* store, int64_t slot, int64_t now) {
    if (store && entry_) {
        WindowExitEvent e;
        e.layer = layer;
        e.head = head;
        e.head_dim = cfg_.head_dim;
        e.pos = pos;
        e.now = now;
        e.score = score;
        const auto read_entry = [store, slot](float* k, float* v) { store->read(slot, k, v); };
        const FunctionRef<void(float*, float*)> read = read_entry;
        e.read = &read;
        e.state = state_.get();
        score = entry_->on_window_exit(e);
    }
    switch (policy_.admission.kind) {
        case Rule::Kind::kDropAll: return false;
        case Rule::Kind::kThreshold: return score >= policy_.admission.tau;
        default: return true;
    }
}

HeadCache::Slot KVCache::append(int layer, int head, const float* k, const float* v, int32_t pos, float score) {
    const auto admit_here = [this, layer, head, pos](int32_t p, float& s, const PageStore* st, int64_t slot) {
        if (hold_) {  // judged by end_prefill, after the last piece of the prompt
            held_[static_cast<size_t>(layer) * n_head_kv_ + head].push_back({p, pos, st != nullptr});
            return true;
        }
        return admit(layer, head, p, s, st, slot, pos);
    };
    return this->head(layer, head).append(k, v, pos, score, admit_here);
}

HeadCache::Slot KVCache::append_unadmitted(int layer, int head, const float* k, const float* v, int32_t pos,
                                           float score) {
    if (policy_.window > 0) return append(layer, head, k, v, pos, score);
    const auto keep_all = [](int32_t, float&, const PageStore*, int64_t) { return true; };
    return this->head(layer, head).append(k, v, pos, score, keep_all);
}

void KVCache::admit_decoded(int layer, int32_t pos) {
    if (policy_.window > 0 || policy_.admission.kind == Rule::Kind::kKeepAll) return;
    for (int h = 0; h < n_head_kv_; ++h) {
        PageStore& g = head(layer, h).global();
        if (!g.empty() && g.positions().back() == pos && !admit(layer, h, pos, g.scores().back(), nullptr, -1, pos))
            g.remove(g.size() - 1);
    }
}

void KVCache::finish_step(int64_t pos0, int64_t T, StepPhase phase) {
    n_tokens_ = pos0 + T;
    if (phase == StepPhase::kDecode) {
        ++decode_steps_;
        if (policy_.timing == Timing::kEveryNDecodeSteps && decode_steps_ % policy_.every_n == 0) compress();
    }
    peak_bytes_ = std::max(peak_bytes_, bytes_in_use());
}

void KVCache::settle_held() {
    for (int l = 0; l < n_layer_; ++l)
        for (int h = 0; h < n_head_kv_; ++h) {
            std::vector<Held>& held = held_[static_cast<size_t>(l) * n_head_kv_ + h];
            if (held.empty()) continue;
            PageStore& g = head(l, h).global();
            std::vector<char> keep(g.size(), 1);
            size_t k = 0;  // both in position order: the held entries are a subsequence of the global region
            for (int64_t i = 0; i < g.size() && k < held.size(); ++i) {
                if (g.positions()[i] != held[k].pos) continue;
                const Held& e = held[k++];
                keep[i] =
                    admit(l, h, e.pos, g.scores()[i], e.from_window ? &g : nullptr, e.from_window ? i : -1, e.now);
            }
            held.clear();
            g.retain(keep);
        }
}

int64_t KVCache::n_held() const {
    int64_t n = 0;
    for (const auto& h : held_) n += static_cast<int64_t>(h.size());
    return n;
}

void KVCache::end_prefill_chunk() {
    if (compress_during_prefill_) end_prefill();
}

void KVCache::end_prefill() {
    hold_ = false;
    settle_held();
    if (policy_.timing == Timing::kAfterPrefill || policy_.timing == Timing::kEveryNDecodeSteps) compress();
}

void KVCache::set_scores(const EntryScores& es) {
    require(static_cast<int>(es.by_pos.size()) == n_layer_, "scores for ", es.by_pos.size(), " layers, the cache has ",
            n_layer_);
    for (int l = 0; l < n_layer_; ++l) {
        require(static_cast<int>(es.by_pos[l].size()) == n_head_kv_, "scores for ", es.by_pos[l].size(),
                " KV heads, the cache has ", n_head_kv_);
        for (int h = 0; h < n_head_kv_; ++h) {
            const auto& m = es.by_pos[l][h];
            HeadCache& hc = head(l, h);
            for (Region r : kRegionsInOrder) {
                PageStore* ps = hc.region(r);
                for (int64_t i = 0; i < ps->size(); ++i) {
                    auto it = m.find(ps->positions()[i]);
                    ps->scores()[i] = it == m.end() ? es.missing : it->second;
                }
            }
        }
    }
}

void KVCache::compress() {
    if (policy_.compression.kind == Rule::Kind::kKeepAll) return;
    // Reused from call to call (a budget runs this after every decode step): they keep their capacity.
    std::vector<HeadCandidates>& cands = compress_candidates_;
    std::vector<std::vector<float>>& effective = compress_effective_;
    cands.resize(heads_.size());
    effective.resize(heads_.size());
    for (int l = 0; l < n_layer_; ++l)
        for (int h = 0; h < n_head_kv_; ++h) {
            HeadCache& hc = head(l, h);
            HeadCandidates& c = cands[static_cast<size_t>(l) * n_head_kv_ + h];
            c.layer = l;
            c.head = h;
            c.scores = hc.global().scores().data();
            c.n = hc.global().size();
            if (entry_) {  // the scores the rule compares now
                effective[static_cast<size_t>(l) * n_head_kv_ + h].resize(c.n);
                float* e = effective[static_cast<size_t>(l) * n_head_kv_ + h].data();
                for (int64_t i = 0; i < c.n; ++i)
                    e[i] = entry_->effective_score(c.scores[i], hc.global().positions()[i], n_tokens_, l, h);
                c.scores = e;
            }
            c.n_reference = std::max<int64_t>(c.n, n_tokens_ - hc.sinks().size() - hc.window().size());
        }
    apply_rule(policy_.compression, cands, RuleContext{n_layer_, n_tokens_}, &compress_rule_);
    size_t i = 0;
    for (int l = 0; l < n_layer_; ++l)
        for (int h = 0; h < n_head_kv_; ++h) head(l, h).global().retain(cands[i++].keep);
}

void KVCache::rollback(int64_t n) {
    for (auto& held : held_)
        held.erase(std::remove_if(held.begin(), held.end(), [n](const Held& e) { return e.pos >= n; }), held.end());
    for (auto& hc : heads_)
        hc.truncate(static_cast<int32_t>(std::min<int64_t>(n, std::numeric_limits<int32_t>::max())));
    n_tokens_ = std::min(n_tokens_, n);
}

void KVCache::clear() {
    for (auto& hc : heads_) hc.clear();
    for (auto& held : held_) held.clear();
    hold_ = false;
    if (policy_.scorer) state_ = policy_.scorer->new_state(cfg_);
    n_tokens_ = 0;
    decode_steps_ = 0;
    selected_read_ = selected_total_ = 0;
    peak_bytes_ = 0;
}

uint64_t KVCache::bytes_in_use() const {
    size_t local = 0, global = 0;
    for (const HeadCache& hc : heads_) {
        local += hc.sinks().pages().size() + hc.window().pages().size();
        global += hc.global().pages().size();
    }
    return static_cast<uint64_t>(local) * pool_->local().page_bytes() +
           static_cast<uint64_t>(global) * pool_->page_bytes();
}

KVStats KVCache::stats() const {
    KVStats s;
    s.policy = policy_.spec.empty() ? policy_.name : policy_.spec;
    if (s.policy.empty()) s.policy = "full";
    s.kv_type = kv_types_spec({pool_->key_type(), pool_->value_type()});
    s.kv_quant_at = kv_quant_at_name(pool_->quant_at());
    s.kv_type_local = kv_types_spec({pool_->local().key_type(), pool_->local().value_type()});
    s.tokens = n_tokens_;
    s.sinks = policy_.sinks;
    s.window = policy_.window;
    s.entries.assign(n_layer_, std::vector<int64_t>(n_head_kv_));
    s.beyond.assign(n_layer_, std::vector<int64_t>(n_head_kv_));
    int64_t kept = 0, kept_beyond = 0;
    for (int l = 0; l < n_layer_; ++l)
        for (int h = 0; h < n_head_kv_; ++h) {
            const HeadCache& hc = head(l, h);
            s.entries[l][h] = hc.size();
            s.beyond[l][h] = hc.sinks().size() + hc.global().size();
            kept += hc.size();
            kept_beyond += s.beyond[l][h];
            s.selection_bytes += hc.global().bounds_bytes();
        }
    const int64_t heads = static_cast<int64_t>(n_layer_) * n_head_kv_;
    const int64_t total = n_tokens_ * heads;
    const int64_t total_beyond = std::max<int64_t>(0, n_tokens_ - policy_.window) * heads;
    s.compression_ratio = total > 0 ? 1.0 - static_cast<double>(kept) / total : 0.0;
    s.density = total_beyond > 0 ? static_cast<double>(kept_beyond) / total_beyond : 1.0;
    s.kv_bytes_final = bytes_in_use();
    for (const HeadCache& hc : heads_) {
        s.kv_bytes_local +=
            static_cast<uint64_t>(hc.sinks().pages().size() + hc.window().pages().size()) * pool_->local().page_bytes();
        s.kv_bytes_global += static_cast<uint64_t>(hc.global().pages().size()) * pool_->page_bytes();
    }
    s.kv_bytes_peak = std::max(peak_bytes_, s.kv_bytes_final);
    s.kv_bytes_full = static_cast<uint64_t>(total) * 2 * cfg_.head_dim * 2;
    s.scorer_state_bytes = state_ ? state_->bytes() : 0;
    if (selected_total_ > 0)
        s.read_fraction = static_cast<double>(selected_read_) / static_cast<double>(selected_total_);
    return s;
}

namespace {
/// 4: the global region's key and value types, then the sinks' and the window's (each its name, kv_type_name: a
/// string; they differ under quantization at admission), and after the page size the Walsh–Hadamard sizes of the
/// keys' and the values' rotation (int32 each, 0: not rotated; cache/kv_rotation.h). Still read: 3, the same with
/// each type as an int32 position in kLegacyTypes; 2 (as quantization at write, no rotation): the key type and the
/// value type (positions); 1 (likewise): one type for both.
constexpr uint32_t kCacheRecordVersion = 4;
/// The types of records before version 4, by the position they were written as (the element type enum of those
/// builds, which is not KVType's order by contract).
constexpr KVType kLegacyTypes[] = {KVType::kF32, KVType::kF16, KVType::kBF16, KVType::kQ8_0, KVType::kQ4_0};

/// A saved type as a name: version 4 reads the name; earlier versions an int32 position in kLegacyTypes (a position
/// outside it reads as "unknown type N", refused below as another type than the cache's).
std::string read_type_name(BinaryReader& r, uint32_t version) {
    if (version >= 4) return r.str(64);
    const int32_t t = r.pod<int32_t>();
    return t >= 0 && t < static_cast<int32_t>(std::size(kLegacyTypes)) ? kv_type_name(kLegacyTypes[t])
                                                                       : "unknown type " + std::to_string(t);
}
}  // namespace

void KVCache::save(BinaryWriter& w) const {
    w.pod(kCacheRecordVersion);
    w.pod<int32_t>(n_layer_);
    w.pod<int32_t>(n_head_kv_);
    w.pod<int32_t>(pool_->head_dim());
    w.str(kv_type_name(pool_->key_type()));
    w.str(kv_type_name(pool_->value_type()));
    w.str(kv_type_name(pool_->local().key_type()));
    w.str(kv_type_name(pool_->local().value_type()));
    w.pod<int32_t>(pool_->page_tokens());
    w.pod<int32_t>(pool_->rotation().key_n());
    w.pod<int32_t>(pool_->rotation().value_n());
    w.pod(n_ctx_);
    w.str(policy_.spec);
    w.pod(n_tokens_);
    w.pod(decode_steps_);
    w.pod(selected_read_);
    w.pod(selected_total_);
    for (const HeadCache& h : heads_) h.save(w);
    w.pod<uint8_t>(state_ ? 1 : 0);
    if (state_) state_->save(w);
}

void KVCache::load(BinaryReader& r) {
    const std::string& what = r.what();
    const uint32_t version = r.pod<uint32_t>();
    require(version >= 1 && version <= kCacheRecordVersion, what, " has cache record version ", version,
            "; this build reads versions 1 to ", kCacheRecordVersion);
    const int32_t L = r.pod<int32_t>(), H = r.pod<int32_t>(), d = r.pod<int32_t>();
    const std::string ktype = read_type_name(r, version);
    const std::string vtype = version == 1 ? ktype : read_type_name(r, version);
    // Versions 1 and 2 quantized every entry at write: the sinks and the window hold the global region's types.
    const std::string lktype = version < 3 ? ktype : read_type_name(r, version);
    const std::string lvtype = version < 3 ? vtype : read_type_name(r, version);
    const int32_t page = r.pod<int32_t>();
    const int32_t rot_k = version >= 3 ? r.pod<int32_t>() : 0, rot_v = version >= 3 ? r.pod<int32_t>() : 0;
    require(L == n_layer_ && H == n_head_kv_ && d == pool_->head_dim(), what, " holds a cache of ", L, " layers × ", H,
            " KV heads × d ", d, "; this model has ", n_layer_, " × ", n_head_kv_, " × ", pool_->head_dim());
    const KVPool& lp = pool_->local();
    // The sinks' and the window's types are named where they differ from the global region's (quantization at
    // admission).
    auto local_note = [](const std::string& k, const std::string& v, const std::string& lk, const std::string& lv) {
        return lk == k && lv == v ? std::string() : " (sinks and window: keys " + lk + ", values " + lv + ")";
    };
    const std::string pk = kv_type_name(pool_->key_type()), pv = kv_type_name(pool_->value_type()),
                      plk = kv_type_name(lp.key_type()), plv = kv_type_name(lp.value_type());
    require(ktype == pk && vtype == pv && lktype == plk && lvtype == plv, what, " holds keys of type ", ktype,
            " and values of type ", vtype, local_note(ktype, vtype, lktype, lvtype), "; this cache stores keys as ", pk,
            " and values as ", pv, local_note(pk, pv, plk, plv),
            " (--cache-type-k / --cache-type-v, or --kv-type for both; --kv-quant-at)");
    const KVRotation& rot = pool_->rotation();
    if (rot_k != rot.key_n() || rot_v != rot.value_n()) {
        auto name = [](int32_t n, const char* half) {
            return n == 0 ? std::string() : std::string(half) + " H_" + std::to_string(n);
        };
        std::string saved = name(rot_k, "keys");
        const std::string sv = name(rot_v, "values");
        saved += saved.empty() || sv.empty() ? sv : ", " + sv;
        fail(what, " holds entries stored with rotation ", saved.empty() ? "none" : saved,
             "; this cache stores them with rotation ", rot.describe(), " (--kv-rotate)");
    }
    require(page == pool_->page_tokens(), what, " holds pages of ", page, " entries; this cache's pages hold ",
            pool_->page_tokens());
    const int64_t n_ctx = r.pod<int64_t>();
    require(n_ctx <= n_ctx_, what, " holds a sequence of context ", n_ctx, ", larger than this cache's ", n_ctx_);
    const std::string spec = r.str(1 << 16);
    require(spec == policy_.spec, what, " was saved under policy '", spec, "', this cache runs '", policy_.spec, "'");
    clear();
    try {
        n_tokens_ = r.pod<int64_t>();
        decode_steps_ = r.pod<int64_t>();
        selected_read_ = r.pod<int64_t>();
        selected_total_ = r.pod<int64_t>();
        if (n_tokens_ < 0 || n_tokens_ > n_ctx_) fail(what, " is corrupted (position ", n_tokens_, ")");
        for (HeadCache& h : heads_) h.load(r, n_tokens_);
        const bool has_state = r.pod<uint8_t>() != 0;
        if (has_state != (state_ != nullptr)) fail(what, " does not hold the scorer state this policy keeps");
        if (state_) state_->load(r);
    } catch (...) {
        clear();
        throw;
    }
    peak_bytes_ = bytes_in_use();
}

}  // namespace kvsieve
