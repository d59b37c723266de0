#include "policy/policy.h"

#include <cmath>
#include <cstdlib>

#include "util/error.h"

namespace kvsieve {

void register_all_presets();  // policy/registry.cpp

std::string timing_name(Timing t) {
    switch (t) {
        case Timing::kAtWrite: return "at_write";
        case Timing::kAtWindowExit: return "at_window_exit";
        case Timing::kAfterPrefill: return "after_prefill";
        case Timing::kEveryNDecodeSteps: return "every_n_decode_steps";
    }
    return "?";
}

bool Policy::is_full() const {
    return admission.kind == Rule::Kind::kKeepAll && compression.kind == Rule::Kind::kKeepAll;
}

std::string Policy::describe() const {
    std::string s = name + ": scorer " + (scorer ? scorer->name() : std::string("none"));
    if (window > 0 || admission.kind != Rule::Kind::kKeepAll) s += ", admission " + admission.describe();
    if (compression.kind != Rule::Kind::kKeepAll) {
        s += ", " + compression.describe() + " " + timing_name(timing);
        if (timing == Timing::kEveryNDecodeSteps) s += "(n=" + std::to_string(every_n) + ")";
    }
    return s + ", s=" + std::to_string(sinks) + ", w=" + std::to_string(window);
}

PolicyParams::PolicyParams(std::string preset, std::map<std::string, std::string> kv)
    : preset_(std::move(preset)), kv_(std::move(kv)) {}

std::string PolicyParams::get_string(const std::string& k, const std::string& def) {
    auto it = kv_.find(k);
    if (it == kv_.end()) return def;
    used_[k] = true;
    return it->second;
}

double PolicyParams::get_double(const std::string& k, double def) {
    if (!has(k)) return def;
    const std::string v = get_string(k, "");
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    require(!v.empty() && end && *end == '\0' && std::isfinite(x), "policy ", preset_, ": ", k, "='", v,
            "' is not a number");
    return x;
}

int64_t PolicyParams::get_int(const std::string& k, int64_t def) {
    if (!has(k)) return def;
    const std::string v = get_string(k, "");
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    require(!v.empty() && end && *end == '\0', "policy ", preset_, ": ", k, "='", v, "' is not an integer");
    return x;
}

double PolicyParams::get_ratio(const std::string& k, double def) {
    const double r = get_double(k, def);
    require(r >= 0 && r < 1, "policy ", preset_, ": ", k, "=", r, " is outside [0, 1)");
    return r;
}

void PolicyParams::check_all_used() const {
    for (const auto& [k, v] : kv_)
        if (!used_.count(k)) fail("policy ", preset_, ": unknown key '", k, "'");
}

namespace {
std::map<std::string, PresetInfo>& registry() {
    static std::map<std::string, PresetInfo> r;
    return r;
}
}  // namespace

void register_preset(PresetInfo info) { registry()[info.name] = std::move(info); }

const std::map<std::string, PresetInfo>& presets() {
    static const bool once = [] {
        register_all_presets();
        return true;
    }();
    (void)once;
    return registry();
}

void read_budget_rule(PolicyParams& p, Policy& policy, double default_ratio, const std::string& default_rule) {
    const std::string rule = p.get_string("rule", default_rule);
    Rule r;
    if (rule == "head") r.kind = Rule::Kind::kHeadBudget;
    else if (rule == "layer") r.kind = Rule::Kind::kLayerBudget;
    else if (rule == "global") r.kind = Rule::Kind::kGlobalBudget;
    else if (rule == "threshold") r.kind = Rule::Kind::kThreshold;
    else fail("policy ", p.preset(), ": rule='", rule, "' is not head, layer, global or threshold");
    if (r.kind == Rule::Kind::kThreshold) {
        require(p.has("tau"), "policy ", p.preset(), ": rule=threshold needs tau=<number>");
        r.tau = p.get_double("tau", 0);
    } else {
        require(!(p.has("ratio") && p.has("budget")), "policy ", p.preset(), ": give ratio or budget, not both");
        r.ratio = p.get_ratio("ratio", default_ratio);
        r.budget = p.get_int("budget", -1);
        require(r.budget == -1 || r.budget > 0, "policy ", p.preset(), ": budget=", r.budget, " must be positive");
        r.safeguard = p.get_double("safeguard", 0.2);
        require(r.safeguard >= 0 && r.safeguard <= 1, "policy ", p.preset(), ": safeguard must be in [0, 1]");
    }
    policy.compression = r;
    const int64_t every = p.get_int("every", r.budget > 0 ? 1 : 0);
    require(every >= 0, "policy ", p.preset(), ": every=", every, " must be ≥ 0");
    policy.timing = every > 0 ? Timing::kEveryNDecodeSteps : Timing::kAfterPrefill;
    policy.every_n = static_cast<int>(std::max<int64_t>(every, 1));
    // Admission timings: the threshold decides once per entry, at write or when it leaves the window.
    const std::string timing = p.get_string("timing", timing_name(policy.timing));
    if (timing == "at_write" || timing == "at_window_exit") {
        require(r.kind == Rule::Kind::kThreshold, "policy ", p.preset(), ": timing=", timing, " needs rule=threshold");
        policy.admission = r;
        policy.compression = Rule{};
        policy.timing = timing == "at_write" ? Timing::kAtWrite : Timing::kAtWindowExit;
        const int64_t w = p.get_int("window", timing == "at_write" ? 0 : 128);
        require(w >= 0, "policy ", p.preset(), ": window must be ≥ 0");
        require(timing == "at_write" ? w == 0 : w > 0, "policy ", p.preset(), ": timing=", timing,
                timing == "at_write" ? " takes no window" : " needs window > 0");
        policy.window = static_cast<int>(w);
    } else if (timing != "after_prefill" && timing != "every_n_decode_steps") {
        fail("policy ", p.preset(), ": timing='", timing,
             "' is not at_write, at_window_exit, after_prefill or every_n_decode_steps");
    } else {
        // A protected local window beside the budget: each head keeps B = s + w + k (KVpop eq. 1), the rule ranking
        // only the entries beyond the sinks and the window.
        const int64_t w = p.get_int("window", policy.window);
        require(w >= 0, "policy ", p.preset(), ": window must be ≥ 0");
        policy.window = static_cast<int>(w);
    }
    policy.sinks = static_cast<int>(p.get_int("sinks", policy.sinks));
    require(policy.sinks >= 0, "policy ", p.preset(), ": sinks must be ≥ 0");
}

Policy parse_policy(const std::string& spec) {
    const size_t colon = spec.find(':');
    const std::string name = spec.substr(0, colon);
    const auto& all = presets();
    auto it = all.find(name);
    if (it == all.end()) {
        std::string names;
        for (const auto& [n, i] : all) names += (names.empty() ? "" : ", ") + n;
        fail("unknown policy '", name, "' (known: ", names, ")");
    }
    std::map<std::string, std::string> kv;
    if (colon != std::string::npos) {
        std::string rest = spec.substr(colon + 1);
        size_t start = 0;
        while (start <= rest.size()) {
            const size_t comma = rest.find(',', start);
            const std::string item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            if (!item.empty()) {
                const size_t eq = item.find('=');
                require(eq != std::string::npos && eq > 0, "policy ", name, ": '", item, "' is not key=value");
                const std::string k = item.substr(0, eq);
                require(!kv.count(k), "policy ", name, ": key '", k, "' given twice");
                kv[k] = item.substr(eq + 1);
            }
            if (comma == std::string::npos) break;
            start = comma + 1;
        }
    }
    PolicyParams params(name, kv);
    Policy p = it->second.make(params);
    params.check_all_used();
    p.name = name;
    p.spec = spec;
    return p;
}

}  // namespace kvsieve
