#include "cli/cache_options.h"

#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "session/prefill.h"
#include "session/prefill_plan.h"
#include "util/deprecation.h"
#include "util/error.h"

namespace kvsieve::cli {

CLI::Option* add_kv_pool_option(CLI::App* cmd, double& mb, const std::string& help) {
    CLI::Option* pool = cmd->add_option("--kv-pool-mb", mb, help)->capture_default_str();
    CLI::Option* old =
        cmd->add_option("--kv-budget-mb", mb, "deprecated alias of --kv-pool-mb")->each([](const std::string&) {
            warn_deprecated("--kv-budget-mb", "--kv-pool-mb");
        });
    old->excludes(pool);
    return pool;
}

namespace {
/// The block-quantized KV types' names from the table (kernels/kv_types.h), " / " separated, for help texts.
std::string quantized_kv_type_names() {
    std::string s;
    for (const KVTypeTraits& r : kv_type_table())
        if (r.block > 1) s += (s.empty() ? "" : " / ") + std::string(r.name);
    return s;
}
}  // namespace

void KVTypeOptions::add_to(CLI::App* cmd) {
    cmd->add_option("--kv-type", both,
                    "element type of cached keys and values: " + kv_type_names() +
                        "; or KEY/VALUE[@write|@admission] as reports record it, e.g. q8_0/q4_0@admission")
        ->capture_default_str();
    cmd->add_option("--cache-type-k", key, "element type of cached keys (overrides --kv-type): " + kv_type_names());
    cmd->add_option("--cache-type-v", value, "element type of cached values (overrides --kv-type): " + kv_type_names());
    quant_at_option =
        cmd->add_option("--kv-quant-at", quant_at,
                        "where " + quantized_kv_type_names() +
                            " keys and values are quantized: write (every entry) or admission (sinks and window stay "
                            "f16; an entry is quantized when it leaves the window for the global region)")
            ->capture_default_str();
    cmd->add_option("--kv-rotate", rotate,
                    "store keys and values Walsh-Hadamard rotated: auto (quantized halves when the head dimension is a "
                    "multiple of 64, as llama.cpp), on (always; needs such a head dimension), off")
        ->capture_default_str();
}

KVRotation KVTypeOptions::rotation(int head_dim) const {
    return KVRotation::choose(parse_kv_rotate_mode(rotate), types(), head_dim);
}

std::shared_ptr<KVPool> KVTypeOptions::make_pool(int head_dim, uint64_t pool_bytes) const {
    return make_kv_pool(head_dim, types(), parse_kv_rotate_mode(rotate), pool_bytes);
}

KVTypes KVTypeOptions::types() const {
    auto one = [](const std::string& s, const char* flag) {
        try {
            return parse_kv_type(s);
        } catch (const Error& e) { fail(flag, ": ", e.what()); }
    };
    KVTypes b;
    try {
        b = parse_kv_types(both);
    } catch (const Error& e) { fail("--kv-type: ", e.what()); }
    KVQuantAt at;
    try {
        at = parse_kv_quant_at(quant_at);
    } catch (const Error& e) { fail("--kv-quant-at: ", e.what()); }
    // --kv-quant-at given on the command line (or, without a command line, set away from its default "write").
    const bool at_given = quant_at_option ? quant_at_option->count() > 0 : at != KVQuantAt::kWrite;
    if (both.find('@') != std::string::npos) {
        if (at_given && at != b.quant_at)
            fail("--kv-type ", both, " says the entries are quantized at ", kv_quant_at_name(b.quant_at),
                 " but --kv-quant-at says ", quant_at, " (give the place once)");
        at = b.quant_at;
    }
    return {key.empty() ? b.key : one(key, "--cache-type-k"), value.empty() ? b.value : one(value, "--cache-type-v"),
            at};
}

void CacheOptions::add_to(CLI::App* cmd) {
    cmd->add_option("--policy", policy,
                    "KV policy NAME[:key=value,...], e.g. snapkv:ratio=0.5, streaming_llm:window=256, h2o:capacity=512")
        ->capture_default_str();
    kv.add_to(cmd);
    add_kv_pool_option(cmd, kv_pool_mb, "KV pool size in MiB (0: grow on demand)");
    prefill_chunk_option =
        cmd->add_option(
               "--prefill-chunk", prefill_chunk,
               "prefill in chunks of this many tokens (0: one batch); the cache keeps the same entries "
               "whatever the chunk size, the policy compressing once after the prompt; a multiple of 256 computes "
               "one batch's numbers bit for bit")
            ->capture_default_str();
    cmd->add_flag("--compress-during-prefill", compress_during_prefill,
                  "admit and compress after each prefill chunk, bounding the cache while a long prompt is read (what "
                  "is kept then depends on --prefill-chunk)");
    cmd->add_option("--stats-json", stats_json, "write the KV cache statistics to this JSON file");
}

std::unique_ptr<KVCache> CacheOptions::make_cache(const LlamaModel& m, int64_t n_ctx) const {
    Policy p = parse_policy(policy);
    require(kv_pool_mb >= 0, "--kv-pool-mb must be ≥ 0, got ", kv_pool_mb);
    require(prefill_chunk >= 0, "--prefill-chunk must be ≥ 0, got ", prefill_chunk);
    check_policy_fits(p, n_ctx);
    const bool asked = prefill_chunk_option == nullptr || prefill_chunk_option->count() > 0;
    if (asked && chunk_overruled(p, prefill_chunk, true, compress_during_prefill))
        std::fprintf(stderr,
                     "note: policy %s %s, so its prompt is fed in one piece (--prefill-chunk does not apply to it)\n",
                     p.name.c_str(),
                     p.after_prefill ? "scores the whole prompt after the prefill"
                                     : "scores its entries from the attention of the whole prompt");
    auto pool = kv.make_pool(m.config().head_dim, static_cast<uint64_t>(kv_pool_mb * 1048576.0));
    auto cache = std::make_unique<KVCache>(m.config(), n_ctx, std::move(p), std::move(pool));
    cache->set_compress_during_prefill(compress_during_prefill);
    return cache;
}

void CacheOptions::prefill(Session& session, const std::vector<int32_t>& prompt, std::vector<float>& logits) const {
    PrefillPlan plan;
    plan.chunk = planned_chunk(session.cache().policy(), prefill_chunk, true, compress_during_prefill);
    session.prefill(prompt, plan, logits);
}

void CacheOptions::write_stats(const KVStats& s) const {
    if (stats_json.empty()) return;
    std::ofstream f(stats_json);
    if (!f) fail("cannot write '", stats_json, "'");
    f << s.to_json().dump(2) << "\n";
    if (!f) fail("write error on '", stats_json, "'");
}

}  // namespace kvsieve::cli
