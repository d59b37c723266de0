#pragma once
// Command-line options shared by every command that runs a KV cache: --policy, --kv-type, --kv-pool-mb (deprecated
// alias --kv-budget-mb), --prefill-chunk, --stats-json.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "session/session.h"
#include "text/tokenizer.h"

namespace kvsieve::cli {

struct CacheOptions {
    std::string policy = "full";
    std::string kv_type = "f16";
    double kv_pool_mb = 0;  ///< size of the KV pool in MiB (0: grows on demand)
    int64_t prefill_chunk = 0;
    std::string stats_json;

    /// Adds the options to a subcommand.
    void add_to(CLI::App* cmd);
    /// Parses and validates them (throws Error naming a bad value) and builds the cache.
    std::unique_ptr<KVCache> make_cache(const LlamaModel& m, int64_t n_ctx) const;
    /// Feeds the prompt to the session in one batch or in chunks of prefill_chunk tokens (compressing after
    /// each chunk), then ends the prefill (Session::prefill). logits: the last token's.
    void prefill(Session& session, const std::vector<int32_t>& prompt, std::vector<float>& logits) const;
    /// Writes stats as JSON to stats_json if set; throws Error if the file cannot be written.
    void write_stats(const KVStats& s) const;
};

}  // namespace kvsieve::cli
