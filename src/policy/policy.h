#pragma once
// A policy = scorer × rule × timing, plus sink tokens s and local window w (docs/design.md §1). Named methods are
// presets, parsed from "NAME[:key=value,...]".
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "policy/after_prefill.h"
#include "policy/params.h"
#include "policy/rule.h"
#include "policy/scorer.h"
#include "policy/selection.h"
#include "policy/spec_text.h"

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
    std::string name;  ///< preset name
    std::string spec;  ///< the text it was parsed from
    int sinks = 0;     ///< s: first positions always kept
    int window = 0;    ///< w: most recent positions always kept (0: none)
    /// null: no scores (full, streaming_llm:window); an EntryScorer or a StepScorer (policy/scorer.h), not yet made
    /// for a model (the cache calls Scorer::for_model).
    std::shared_ptr<const Scorer> scorer;
    Rule admission;    ///< applied at write (w = 0) or window exit: keep_all, drop_all or threshold
    Rule compression;  ///< applied to the global region at `timing`
    Timing timing = Timing::kAfterPrefill;
    /// Prefill attention in which each query sees its local window plus the entries the admission rule keeps (by
    /// their stored scores), exactly what a decode step at its position sees (SP-KV eqs. 3–5); false: dense causal
    /// prefill, compression afterwards (kvpress). Needs a scorer without attention statistics.
    bool gated_prefill = false;
    int every_n = 1;  ///< for kEveryNDecodeSteps
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

/// How a spec's predictor references become files (the `model=` key of learned presets: kvzap, wgkv, kvpop,
/// kvpop_mlp). Without a resolver a value is a path on this machine (the command-line tool: its user owns the
/// files). A server sets one that accepts only the names of predictors its operator registered
/// (predict/predictor_registry.h), so that a request never names a file.
struct PolicyParseOptions {
    /// (preset, value of `model=`) → the path to load. Throws Error for a value it refuses; the message is shown to
    /// whoever wrote the spec, so it must not reveal paths or file contents.
    std::function<std::string(const std::string& preset, const std::string& value)> resolve_model;
};

/// key=value parameters of a spec, checked against the preset's declarations (policy/params.h) when constructed.
/// A getter without a fallback returns the declared default; one with a fallback is for keys whose default depends
/// on other keys (declared with a note, no literal default). Keys that were given but that no getter read (a key that
/// does not apply to the chosen variant, such as tau with a budget rule) are refused by check_all_used.
class PolicyParams {
public:
    /// A key's deprecated alias (ParamDecl::deprecated_alias) is read as the key, printing a deprecation warning once
    /// per process. Throws Error for a key not among `decls` (listing the valid keys), a key given together with its
    /// alias, or a value its declaration refuses (parse_param_value). `decls` must outlive this object.
    PolicyParams(std::string preset, const std::vector<ParamDecl>& decls, std::map<std::string, std::string> kv,
                 const PolicyParseOptions* options = nullptr);
    bool has(const std::string& k) const { return values_.count(k) > 0; }
    /// True when the preset declares key `k`.
    bool declares(const std::string& k) const;
    /// True when `k` was given under its deprecated alias (ParamDecl::deprecated_alias) rather than its own name.
    bool given_as_alias(const std::string& k) const { return aliased_.count(k) > 0; }
    /// real or ratio key. Throws std::logic_error if the key is undeclared or has no literal default.
    double get_double(const std::string& k);
    double get_double(const std::string& k, double fallback);
    /// int or flag key.
    int64_t get_int(const std::string& k);
    int64_t get_int(const std::string& k, int64_t fallback);
    /// ratio ∈ [0, 1) (a compression ratio: the fraction removed).
    double get_ratio(const std::string& k) { return get_double(k); }
    /// flag key: value != 0.
    bool get_flag(const std::string& k) { return get_int(k) != 0; }
    bool get_flag(const std::string& k, bool fallback) { return get_int(k, fallback ? 1 : 0) != 0; }
    /// enum or name key, as written.
    std::string get_string(const std::string& k);
    std::string get_string(const std::string& k, const std::string& fallback);
    /// The file a predictor reference (key `k`, `model=` by default) names: the value itself, or what the options'
    /// resolver makes of it; without a resolver, a value that is not an existing path but the name of a predictor
    /// trained for the loaded model (predict/bundled_predictors.h) is that predictor's folder. Without the key, the
    /// predictor trained for the loaded model (default_predictor_path). `what` describes the expected value in the error for a missing key ("checkpoint
    /// directory"). Throws Error when the key is missing and no predictor was trained for the loaded model (naming those that exist and the
    /// command that trains one), or when the resolver refuses the value.
    std::string get_model_path(const std::string& what, const std::string& k = "model");
    /// Throws Error listing keys that no getter read.
    void check_all_used() const;
    const std::string& preset() const { return preset_; }

private:
    const ParamDecl& decl(const std::string& k) const;
    const ParamValue* given(const std::string& k);
    ParamValue default_of(const std::string& k) const;

    std::string preset_;
    const std::vector<ParamDecl>* decls_;
    std::map<std::string, ParamValue> values_;
    std::map<std::string, bool> used_;
    std::map<std::string, bool> aliased_;  // keys given under their deprecated alias
    const PolicyParseOptions* options_;
};

/// A preset: builds a Policy from parameters.
struct PresetInfo {
    std::string name;
    std::string summary;            ///< one line with the source paper
    std::vector<ParamDecl> params;  ///< every key it accepts (policy/params.h)
    std::function<Policy(PolicyParams&)> make;
    /// Learned presets: which keys the predictor's trained defaults fill and from where (policy/learned_rule.h,
    /// trained_defaults_note); `kvsieve policies` prints it. Empty for the others.
    std::string trained_defaults = {};
};

/// Registers a preset (called from policy/registry.cpp). Throws Error when its declarations are malformed.
void register_preset(PresetInfo info);
/// All presets, by name.
const std::map<std::string, PresetInfo>& presets();

/// A read-time selection (policy/selection.h), named in a spec after a '+'.
struct SelectionInfo {
    std::string name;
    std::string summary;  ///< one line with the source paper
    std::vector<ParamDecl> params;
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
/// preset, selection or key (listing the valid ones), a value its declaration refuses (policy/params.h: overflow,
/// NaN or ±inf, outside the range), a key that does not apply to the chosen variant, a predictor reference the
/// options' resolver refuses, more than one selection or admission, an admission after the selection, or an item
/// that is not key=value (the spec's text is split by split_policy_spec, policy/spec_text.h).
Policy parse_policy(const std::string& spec, const PolicyParseOptions& options = {});

/// Throws Error naming the value when the policy's budget or window is larger than a context of n_ctx tokens, or
/// when a head's protected and budgeted entries B = s + w + k (sinks, window, per-head budget) exceed it.
void check_policy_fits(const Policy& p, int64_t n_ctx);

/// Shared handling of the budget keys of scored presets (declared by budget_rule_params, policy/params.h): `ratio`
/// (kvpress compression ratio) or `budget` (entries k per head beyond the sinks and the window; a preset that
/// declares `capacity` instead, h2o, gets its value B = s + w + k in policy.compression.budget and splits it itself), `rule` = head |
/// layer | global | threshold (with `tau`), `safeguard` for layer, `every` (decode steps between evictions; 0 =
/// prefill only), `timing`, `sinks` = s and `window` = w (protected regions, so that a head keeps B = s + w + k; both
/// 0 by default, when ratio and budget count every entry). The defaults are the preset's declared ones. Sets
/// policy.compression, admission, timing, sinks and window. Throws Error for a combination that does not hold
/// (ratio and budget, threshold without tau, an admission timing without a threshold, …).
void read_budget_rule(PolicyParams& p, Policy& policy);

}  // namespace kvsieve
