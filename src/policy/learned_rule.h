#pragma once
// The shared keys of the learned presets (kvzap, spkv, wgkv, kvpop, kvpop_mlp) and the one precedence that fills
// them: a value the spec gives wins, else the predictor's trained default (predict/trained_defaults.h: its config.json
// or GGUF metadata), else the preset's own default:
//     spec  >  trained defaults  >  preset defaults
// The threshold presets (kvzap rule=threshold, spkv, wgkv) build their whole admission block here: keep an entry
// beyond the local window iff its predicted score ≥ τ (KVzap Alg. 1; SP-KV eq. 7; WG-KV §4.3), s sinks, w = 0
// judging each entry as it is written. A preset whose predictor is known when the spec is parsed applies it then;
// SP-KV, whose gates live in the served model's GGUF, applies the same function from Scorer::adjust_policy on the
// scorer Scorer::for_model makes for the model.
#include <cstdint>
#include <optional>
#include <string>

#include "policy/policy.h"
#include "predict/trained_defaults.h"

namespace kvsieve {

/// spec > trained > preset for one value.
template <class T>
T spec_trained_preset(const std::optional<T>& spec, const std::optional<T>& trained, T preset) {
    return spec ? *spec : trained ? *trained : preset;
}

/// The value of int or flag key `k` when the spec gives it, else empty.
std::optional<int64_t> given_int(PolicyParams& p, const std::string& k);
/// The value of real key `k` when the spec gives it, else empty.
std::optional<double> given_double(PolicyParams& p, const std::string& k);

/// The threshold block as a spec gives it (each field empty when left to the defaults).
struct ThresholdSpec {
    std::optional<double> tau;
    std::optional<int64_t> window, sinks;
    bool gated_prefill = false;  ///< sparse_prefill (the preset's declared default when not given)
};

/// A threshold preset's own defaults and the range a τ must lie in (closed).
struct ThresholdPreset {
    double tau = 0;
    int64_t window = 0, sinks = 0;
    double tau_min = -1e300, tau_max = 1e300;
};

/// Reads tau, window, sinks (each only when given) and sparse_prefill (declared with a literal default) from `p`.
ThresholdSpec read_threshold_spec(PolicyParams& p);

/// Fills `pol`'s threshold block: admission = keep iff score ≥ τ (Rule::Kind::kThreshold), window w, sinks s, and
/// timing at window exit for w > 0, else at write (the window ablation); gated_prefill from the spec. Each of τ, w,
/// s is spec > trained > preset. Throws Error naming the preset, the value and the file it came from when a trained
/// τ lies outside [tau_min, tau_max] or a trained window or sinks outside [0, kMaxTokens].
void apply_threshold_rule(const std::string& preset, const ThresholdSpec& spec, const TrainedDefaults& trained,
                          const ThresholdPreset& dflt, Policy& pol);

/// Throws Error naming the preset, the key, the value and `trained.source` when a trained size `v` (window, sinks)
/// lies outside [0, kMaxTokens].
void check_trained_tokens(const std::string& preset, const TrainedDefaults& trained, const char* key,
                          const std::optional<int64_t>& v);

/// The precedence line `kvsieve policies` prints for a learned preset (PresetInfo::trained_defaults): "<keys>: the
/// spec's value, else the predictor's trained default (<where>), else the default listed".
std::string trained_defaults_note(const std::string& keys, const std::string& where);

}  // namespace kvsieve
