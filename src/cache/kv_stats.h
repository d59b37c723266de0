#pragma once
// What a KV cache holds, in the field's terms: entries per head, density ρ, compression ratio, bytes.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvsieve {

/// Statistics of one sequence's cache.
struct KVStats {
    std::string policy;           ///< the policy spec
    std::string kv_type = "f16";  ///< element types of keys and values (kv_types_spec: "q8_0", or "q8_0/f16")
    /// Where quantized entries are quantized (kv_quant_at_name: "write", or "admission": the sinks and the window
    /// hold kv_type_local, the global region kv_type).
    std::string kv_quant_at = "write";
    std::string kv_type_local = "f16";  ///< element types of the sinks' and the window's keys and values
    int64_t tokens = 0;                 ///< positions processed (what a full cache would hold per head)
    int sinks = 0, window = 0;
    std::vector<std::vector<int64_t>> entries;  ///< [L][Hkv] entries kept
    std::vector<std::vector<int64_t>> beyond;   ///< [L][Hkv] entries kept outside the local window
    double compression_ratio = 0;               ///< 1 − kept / (tokens · L · Hkv)  (kvpress)
    double density = 1;                         ///< kept / total among entries outside the local window (SP-KV eq. 8)
    uint64_t kv_bytes_final = 0;      ///< bytes of pages in use now (at the real row sizes: 34/32 bytes per element for
                                      ///< Q8_0, 18/32 for Q4_0, 2 for F16 and BF16, 4 for F32)
    uint64_t kv_bytes_local = 0;      ///< of kv_bytes_final: the sinks' and the window's pages
    uint64_t kv_bytes_global = 0;     ///< of kv_bytes_final: the global region's pages
    uint64_t kv_bytes_peak = 0;       ///< most bytes of pages in use at once
    uint64_t kv_bytes_full = 0;       ///< bytes a full F16 cache of the same tokens would take (unpaged)
    uint64_t scorer_state_bytes = 0;  ///< bytes of the scorer's per-sequence state (e.g. KVpop's mLSTM memories)
    /// Under a read-time selection: entries read / entries kept, summed over the decode steps and heads of the
    /// selected layers (1 without a selection, or before any decode step).
    double read_fraction = 1;
    /// Bytes of the per-page key bounds a read-time selection keeps beside the global region's pages (Quest's
    /// 2 · d binary16 per page), outside the pool; 0 without a selection.
    uint64_t selection_bytes = 0;

    /// [L][Hkv] density of each head: beyond[l][h] / (tokens − window), the per-head form of `density` (1 when
    /// nothing lies beyond the window yet).
    std::vector<std::vector<double>> head_density() const;

    /// A compact table: totals, then per layer min / median / max head length.
    std::string table() const;
    /// JSON with the keys policy, kv_type, kv_quant_at, kv_type_local, tokens, compression_ratio, density,
    /// kv_bytes_peak, kv_bytes_final, kv_bytes_local, kv_bytes_global, kv_bytes_full, read_fraction, selection_bytes, sinks, window and layers: [{layer, entries: [per head]}].
    nlohmann::json to_json() const;
};

}  // namespace kvsieve
