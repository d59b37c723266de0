#pragma once
// Softmax attention kernels over a dense (contiguous) key/value store.
#include <cstdint>

namespace kvsieve {

/// Geometry of grouped-query attention: Hq query heads share Hkv KV heads (group G = Hq/Hkv;
/// query head h reads KV head h / G), head dimension d.
struct AttnShape {
    int n_head = 0;     ///< Hq
    int n_head_kv = 0;  ///< Hkv
    int head_dim = 0;   ///< d
};

/// Causal attention of T queries against a dense cache whose entry j holds position j.
///   q:   [T][Hq][d] float32, query t has position pos0 + t and sees entries 0 … pos0 + t.
///   k,v: [≥ pos0+T][ld_kv] float32 (keys after RoPE), KV head g at offset g·d of each row.
///   out: [T][Hq][d] float32.
/// o = softmax(q·kᵀ / √d) · v per query head (Vaswani et al. 2017, eq. 1), F32 accumulation. Decode-sized T
/// runs a per-(token, KV head) loop reading each key once for the whole GQA group; larger T runs blocked
/// SGEMMs per query head.
void attention_dense_causal(const float* q, int64_t T, int64_t pos0, const float* k, const float* v, int64_t ld_kv,
                            const AttnShape& s, float* out);

/// Query block of attention_prefill_group and attention_prefill_gated, in tokens.
constexpr int64_t kPrefillQueryBlock = 128;

/// What attention_prefill_group reports per key besides the output.
enum class KeyStat { kNone, kSum, kLast };

/// Causal attention of T queries — the G query heads of one KV group — over n = n_prefix + T keys of that
/// KV head: the first n_prefix keys (already cached) are visible to every query, key n_prefix + t to queries
/// t' ≥ t. q: query t of group head g at q + t·ldq + g·d; k, v: [n][d] float32; out likewise with ldo.
/// stat_out [G][n] (if stat ≠ kNone): per key, Σ over the T queries of its softmax weight (kSum), or the last
/// query's weight (kLast). out = nullptr: only the statistics are wanted (the output's product is skipped, and with
/// kLast only the last query's block is computed). Blocked SGEMMs over the queries whose key indices n_prefix + t
/// fall in one block [b·kPrefillQueryBlock, (b+1)·kPrefillQueryBlock), each product reading keys up to its block's
/// end (zero weights past the visible keys), so a query's output does not depend on how the keys before it were
/// split between the cache and the batch: a prompt fed in chunks gets one batch's outputs bit for bit.
/// Single-threaded (callers run heads in parallel).
void attention_prefill_group(const float* q, int64_t ldq, int G, int d, int64_t T, const float* k, const float* v,
                             int64_t n_prefix, float* out, int64_t ldo, KeyStat stat, float* stat_out);

/// Gated causal attention of the G query heads of one KV group (SP-KV eqs. 3–5; WG-KV §4.2): as
/// attention_prefill_group (keys [n][d], the first n_prefix cached and visible to every query, then the T new ones
/// causally), except that key j is visible to query t (position pos_q0 + t) only if it is open (open[j] ≠ 0: a sink,
/// an admitted entry, an entry whose gate is open) or inside the query's local window, pos_q0 + t − pos_k[j] <
/// max(window, 1) (a query always sees itself). So each query sees what a decode step at its position would see.
/// Per block of 128 queries only the keys open or inside some query's window are gathered and read: closed keys
/// outside every window cost nothing (the paper's block skipping, §2.2, at single-key granularity); the block's
/// heads share one SGEMM (as many as keep its scores within 16 MiB).
/// pos_k [n] positions of the keys, the T new ones at pos_q0 … pos_q0 + T − 1 (so each query sees at least itself);
/// open [n]; out as attention_prefill_group. Any window ≥ 0 (a window of 2^32 or more holds every key).
void attention_prefill_gated(const float* q, int64_t ldq, int G, int d, int64_t T, const float* k, const float* v,
                             int64_t n_prefix, const int32_t* pos_k, const char* open, int64_t pos_q0, int64_t window,
                             float* out, int64_t ldo);

/// Plain scalar reference of the same computation (for tests).
void attention_reference(const float* q, int64_t T, int64_t pos0, const float* k, const float* v, int64_t ld_kv,
                         const AttnShape& s, float* out);

}  // namespace kvsieve
