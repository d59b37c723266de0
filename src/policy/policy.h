#pragma once
// A policy = scorer × rule × timing, plus sink tokens s and local window w (DESIGN §1). Named methods are
// presets, parsed from "NAME[:key=value,...]".
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "policy/after_prefill.h"
#include "policy/rule.h"
#include "policy/scorer.h"
#include "policy/selection.h"

namespace kvsieve {

/// When the compression rule runs on the global region.
enum class Timing {
    kAtWrite,            ///< each entry is admitted or dropped as it is written (w = 0)
    kAtWindowExit,       ///< each entry is admitted or dropped when it leaves the local window
    kAfterPrefill,       ///< once the prompt is processed (and after each chunk of a chunked prefill)
    kEveryNDecodeSteps,  ///< after the prompt and then every n decode steps
};
std::string timing_name(Timing t);

/// Everything the cache needs to run a method.
struct Policy {
    std::string name;                ///< preset name
    std::string spec;                ///< the text it was parsed from
    int sinks = 0;                   ///< s: first positions always kept
    int window = 0;                  ///< w: most recent positions always kept (0: none)
    std::shared_ptr<Scorer> scorer;  ///< null: no scores (full, streaming_llm:window)
    Rule admission;                  ///< applied at write (w = 0) or window exit: keep_all, drop_all or threshold
    Rule compression;                ///< applied to the global region at `timing`
    Timing timing = Timing::kAfterPrefill;
    /// Prefill attention in which each query sees its local window plus the entries the admission rule keeps (by
    /// their stored scores), exactly what a decode step at its position sees (SP-KV eqs. 3–5); false: dense causal
    /// prefill, compression afterwards (kvpress). Needs a scorer without attention statistics.
    bool gated_prefill = false;
    int every_n = 1;                 ///< for kEveryNDecodeSteps
    /// Optional step once the prompt is in the cache (KVzip's context reconstruction); the session runs it, writes
    /// the scores it returns into the cache, then runs the compression rule. Such a policy scores the whole
    /// prompt at once, so it cannot be used with a chunked prefill.
    AfterPrefill after_prefill;
    /// What the after-prefill step's scores depend on besides the context (for KVzip: variant, chunk, scoring rows,
    /// sinks, and the policy's window and sinks, which shape the cache it replays over); two policies with the same
    /// non-empty key give the same scores over the same prefilled context, so a caller running both may compute them
    /// once (session/shared_prefill.h). Empty: never shared.
    std::string after_prefill_key;
    /// Read-time selection at decode steps (policy/selection.h), composed after a '+' in the spec.
    Selection selection;

    bool needs_scores() const { return scorer != nullptr; }
    /// True when nothing is ever dropped.
    bool is_full() const;
    /// One line: "snapkv: scorer snapkv, rule head_budget ratio=0.5, after_prefill, s=0, w=0".
    std::string describe() const;
};

/// key=value parameters of a spec, read with type and range checks. Every key must be read by the preset;
/// unread keys are reported as unknown.
class PolicyParams {
public:
    PolicyParams(std::string preset, std::map<std::string, std::string> kv);
    bool has(const std::string& k) const { return kv_.count(k) > 0; }
    double get_double(const std::string& k, double def);
    int64_t get_int(const std::string& k, int64_t def);
    std::string get_string(const std::string& k, const std::string& def);
    /// ratio ∈ [0, 1) (a compression ratio: the fraction removed).
    double get_ratio(const std::string& k, double def);
    /// Throws Error listing keys that no getter read.
    void check_all_used() const;
    const std::string& preset() const { return preset_; }

private:
    std::string preset_;
    std::map<std::string, std::string> kv_;
    std::map<std::string, bool> used_;
};

/// A preset: builds a Policy from parameters.
struct PresetInfo {
    std::string name;
    std::string summary;  ///< one line with the source paper
    std::function<Policy(PolicyParams&)> make;
};

/// Registers a preset (called from policy/registry.cpp).
void register_preset(PresetInfo info);
/// All presets, by name.
const std::map<std::string, PresetInfo>& presets();

/// A read-time selection (policy/selection.h), named in a spec after a '+'.
struct SelectionInfo {
    std::string name;
    std::string summary;  ///< one line with the source paper
    std::function<Selection(PolicyParams&)> make;
};
/// Registers a selection (called from policy/registry.cpp).
void register_selection(SelectionInfo info);
/// All selections, by name.
const std::map<std::string, SelectionInfo>& selections();

/// An admission policy in front of an eviction policy ("ADMISSION>EVICTION" in a spec; policy/stacked.cpp): an entry
/// leaving the eviction policy's window enters its global region only if the admission policy's threshold rule keeps
/// it, and the admitted entries compete for the eviction policy's per-head budget by its scores. Throws Error unless
/// `admit` is a write-time scorer with a threshold (kvzap, spkv, wgkv) and `evict` a write-time scorer with a per-head
/// budget and a window (kvpop, kvpop_mlp).
Policy stack_admission(const Policy& admit, const Policy& evict);

/// Parses "NAME[:key=value,...][+SELECTION[:key=value,...]]" into a policy: a preset, optionally followed by a
/// read-time selection; a selection alone ("quest:budget=512") applies to the full cache. "A>B[+SELECTION]" stacks
/// admission policy A in front of eviction policy B (stack_admission). Throws Error for an unknown
/// preset, selection or key, or a bad value (a ratio outside [0, 1), a budget that is not a positive integer, a
/// threshold that is not a number), or more than one selection.
Policy parse_policy(const std::string& spec);

/// The "key=value,..." text after a spec's colon, of the preset `name`, as a map (keys in sorted order). Throws Error
/// for an item that is not key=value or a key given twice.
std::map<std::string, std::string> parse_spec_params(const std::string& name, const std::string& rest);

/// Throws Error naming the value when the policy's budget or window is larger than a context of n_ctx tokens.
void check_policy_fits(const Policy& p, int64_t n_ctx);

/// Shared handling of the budget keys of scored presets: `ratio` (kvpress compression ratio) or
/// `budget` (entries k per head beyond the sinks and the window), `rule` = head (default) | layer | global,
/// `safeguard` for layer, `every` (decode steps between evictions; 0 = prefill only), `sinks` = s and `window` = w
/// (protected regions, so that a head keeps B = s + w + k; both 0 by default, when ratio and budget count every
/// entry). Sets policy.compression, timing, sinks and window.
void read_budget_rule(PolicyParams& p, Policy& policy, double default_ratio, const std::string& default_rule = "head");

}  // namespace kvsieve
