#pragma once
// Command-line options shared by every command that runs a KV cache: --policy, --kv-type, --cache-type-k,
// --cache-type-v, --kv-quant-at, --kv-rotate, --kv-pool-mb (deprecated alias --kv-budget-mb), --prefill-chunk,
// --compress-during-prefill, --stats-json.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "session/session.h"
#include "text/tokenizer.h"

namespace kvsieve::cli {

/// Element types of the cache: --kv-type sets keys and values, --cache-type-k / --cache-type-v (llama.cpp's
/// spellings; its short -ctk / -ctv are not CLI11 names) set one half each and take precedence; --kv-quant-at
/// says where q8_0 / q4_0 entries are quantized: "write" (every entry when written) or "admission" (sinks and
/// window in f16, an entry quantized when it leaves the window for the global region; docs/architecture.md).
/// --kv-type also takes a whole types spec as reports record it (parse_kv_types: "q8_0/q4_0@admission"), so a
/// recorded cell's kv_type can be passed back as it is.
struct KVTypeOptions {
    std::string both = "f16";                ///< --kv-type: a type, or a spec KEY/VALUE[@write|@admission]
    std::string key, value;                  ///< --cache-type-k, --cache-type-v (empty: --kv-type's)
    std::string quant_at = "write";          ///< --kv-quant-at: write | admission
    std::string rotate = "auto";             ///< --kv-rotate auto|on|off (cache/kv_rotation.h KVRotateMode)
    CLI::Option* quant_at_option = nullptr;  ///< set by add_to: tells a given --kv-quant-at from its default

    /// Adds the four options (with --kv-quant-at and --kv-rotate) to a subcommand.
    void add_to(CLI::App* cmd);
    /// The chosen types and place of quantization; throws Error naming a bad value and the supported types
    /// (kv_type_names()) or places, or when --kv-type's "@place" and a given --kv-quant-at disagree.
    KVTypes types() const;
    /// kv_types_spec(types()): "q8_0", or "q8_0/f16" for keys/values of different types, with "@admission" when
    /// quantized at admission (what the evaluation options' kv_type fields take).
    std::string spec() const { return kv_types_spec(types()); }
    /// The rotation --kv-rotate chooses for these types and a model of head dimension head_dim
    /// (KVRotation::choose). Throws Error naming a bad value, or the head dimension for "on" when it is not a
    /// multiple of 64.
    KVRotation rotation(int head_dim) const;
    /// A pool of these types and rotation (KVPool; pool_bytes 0: grows on demand).
    std::shared_ptr<KVPool> make_pool(int head_dim, uint64_t pool_bytes) const;
};

struct CacheOptions {
    std::string policy = "full";
    KVTypeOptions kv;
    double kv_pool_mb = 0;      ///< size of the KV pool in MiB (0: grows on demand)
    int64_t prefill_chunk = 0;  ///< --prefill-chunk (0: one batch; a command may set another default)
    /// --compress-during-prefill: admit and compress after each prefill chunk (memory-bounded prefill; the kept
    /// entries then depend on the chunk size: KVCache::set_compress_during_prefill). Off by default.
    bool compress_during_prefill = false;
    std::string stats_json;

    /// Adds the options to a subcommand.
    void add_to(CLI::App* cmd);
    CLI::Option* prefill_chunk_option = nullptr;  ///< set by add_to: tells a given --prefill-chunk from its default
    /// Parses and validates them (throws Error naming a bad value) and builds the cache. Says on stderr when
    /// --prefill-chunk does not apply to the policy (session/prefill_plan.h: a step scorer, or an after-prefill step
    /// under --compress-during-prefill) and the user asked for it.
    std::unique_ptr<KVCache> make_cache(const LlamaModel& m, int64_t n_ctx) const;
    /// Feeds the prompt to the session in one batch or in chunks of prefill_chunk tokens as the chunk planner says
    /// (session/prefill_plan.h planned_chunk), then ends the prefill (Session::prefill). logits: the last token's.
    void prefill(Session& session, const std::vector<int32_t>& prompt, std::vector<float>& logits) const;
    /// Writes stats as JSON to stats_json if set; throws Error if the file cannot be written.
    void write_stats(const KVStats& s) const;
};

}  // namespace kvsieve::cli
