#include "policy/learned_rule.h"

#include "util/error.h"

namespace kvsieve {

std::optional<int64_t> given_int(PolicyParams& p, const std::string& k) {
    if (!p.has(k)) return std::nullopt;
    return p.get_int(k);
}

std::optional<double> given_double(PolicyParams& p, const std::string& k) {
    if (!p.has(k)) return std::nullopt;
    return p.get_double(k);
}

ThresholdSpec read_threshold_spec(PolicyParams& p) {
    ThresholdSpec s;
    s.tau = given_double(p, "tau");
    s.window = given_int(p, "window");
    s.sinks = given_int(p, "sinks");
    s.gated_prefill = p.get_flag("sparse_prefill");
    return s;
}

void check_trained_tokens(const std::string& preset, const TrainedDefaults& trained, const char* key,
                          const std::optional<int64_t>& v) {
    if (v)
        require(*v >= 0 && *v <= kMaxTokens, "policy ", preset, ": the trained ", key, "=", *v, " of '", trained.source,
                "' is outside [0, ", kMaxTokens, "]");
}

void apply_threshold_rule(const std::string& preset, const ThresholdSpec& spec, const TrainedDefaults& trained,
                          const ThresholdPreset& dflt, Policy& pol) {
    if (!spec.tau && trained.tau)
        require(*trained.tau >= dflt.tau_min && *trained.tau <= dflt.tau_max, "policy ", preset,
                ": the trained tau=", *trained.tau, " of '", trained.source, "' is outside [", dflt.tau_min, ", ",
                dflt.tau_max, "]");
    if (!spec.window) check_trained_tokens(preset, trained, "window", trained.window);
    if (!spec.sinks) check_trained_tokens(preset, trained, "sinks", trained.sinks);
    pol.admission.kind = Rule::Kind::kThreshold;
    pol.admission.tau = spec_trained_preset(spec.tau, trained.tau, dflt.tau);
    pol.window = static_cast<int>(spec_trained_preset(spec.window, trained.window, dflt.window));
    pol.sinks = static_cast<int>(spec_trained_preset(spec.sinks, trained.sinks, dflt.sinks));
    // w = 0: each entry judged as it is written (KVzap's window ablation).
    pol.timing = pol.window > 0 ? Timing::kAtWindowExit : Timing::kAtWrite;
    pol.gated_prefill = spec.gated_prefill;
}

std::string trained_defaults_note(const std::string& keys, const std::string& where) {
    return keys + ": the spec's value, else the predictor's trained default (" + where + "), else the default listed";
}

}  // namespace kvsieve
