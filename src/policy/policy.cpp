#include "policy/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "predict/bundled_predictors.h"
#include "util/deprecation.h"
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
    s += ", s=" + std::to_string(sinks) + ", w=" + std::to_string(window);
    if (selection.active()) s += ", read-time selection " + selection.describe();
    return s;
}

PolicyParams::PolicyParams(std::string preset, const std::vector<ParamDecl>& decls,
                           std::map<std::string, std::string> kv, const PolicyParseOptions* options)
    : preset_(std::move(preset)), decls_(&decls), options_(options) {
    for (const auto& [key, text] : kv) {
        const std::string& k = key;  // a structured binding cannot be captured by a lambda before clang 16
        auto it = std::find_if(decls.begin(), decls.end(), [&](const ParamDecl& d) { return d.key == k; });
        if (it != decls.end()) {
            values_[k] = parse_param_value(preset_, *it, text);
            continue;
        }
        // A former spelling: read as the key it was renamed to (its errors name the spelling given).
        it = std::find_if(decls.begin(), decls.end(), [&](const ParamDecl& d) { return d.deprecated_alias == k; });
        if (it == decls.end())
            fail("policy ", preset_, ": unknown key '", k, "' (valid keys: ", param_keys_text(decls), ")");
        require(!kv.count(it->key), "policy ", preset_, ": give ", it->key, " or its deprecated alias ", k,
                ", not both");
        ParamDecl as_given = *it;
        as_given.key = k;
        values_[it->key] = parse_param_value(preset_, as_given, text);
        aliased_[it->key] = true;
        warn_deprecated(cat("policy key ", preset_, ":", k), cat(preset_, ":", it->key), "see docs/glossary.md");
    }
}

bool PolicyParams::declares(const std::string& k) const {
    return std::any_of(decls_->begin(), decls_->end(), [&](const ParamDecl& d) { return d.key == k; });
}

const ParamDecl& PolicyParams::decl(const std::string& k) const {
    for (const ParamDecl& d : *decls_)
        if (d.key == k) return d;
    throw std::logic_error("policy " + preset_ + " reads key '" + k + "', which it does not declare");
}

const ParamValue* PolicyParams::given(const std::string& k) {
    (void)decl(k);
    auto it = values_.find(k);
    if (it == values_.end()) return nullptr;
    used_[k] = true;
    return &it->second;
}

ParamValue PolicyParams::default_of(const std::string& k) const {
    const ParamDecl& d = decl(k);
    if (d.default_value.empty())
        throw std::logic_error("policy " + preset_ + " reads key '" + k +
                               "' without a fallback, and it has no default");
    return parse_param_value(preset_, d, d.default_value);
}

namespace {
void expect_type(const std::string& preset, const ParamDecl& d, std::initializer_list<ParamType> types) {
    for (ParamType t : types)
        if (d.type == t) return;
    throw std::logic_error("policy " + preset + " reads key '" + d.key + "' of type " + d.type_name() +
                           " as another type");
}
}  // namespace

double PolicyParams::get_double(const std::string& k) {
    expect_type(preset_, decl(k), {ParamType::kReal, ParamType::kRatio});
    const ParamValue* v = given(k);
    return v ? v->r : default_of(k).r;
}

double PolicyParams::get_double(const std::string& k, double fallback) {
    expect_type(preset_, decl(k), {ParamType::kReal, ParamType::kRatio});
    const ParamValue* v = given(k);
    return v ? v->r : fallback;
}

int64_t PolicyParams::get_int(const std::string& k) {
    expect_type(preset_, decl(k), {ParamType::kInt, ParamType::kFlag});
    const ParamValue* v = given(k);
    return v ? v->i : default_of(k).i;
}

int64_t PolicyParams::get_int(const std::string& k, int64_t fallback) {
    expect_type(preset_, decl(k), {ParamType::kInt, ParamType::kFlag});
    const ParamValue* v = given(k);
    return v ? v->i : fallback;
}

std::string PolicyParams::get_string(const std::string& k) {
    expect_type(preset_, decl(k), {ParamType::kEnum, ParamType::kName});
    const ParamValue* v = given(k);
    return v ? v->text : default_of(k).text;
}

std::string PolicyParams::get_string(const std::string& k, const std::string& fallback) {
    expect_type(preset_, decl(k), {ParamType::kEnum, ParamType::kName});
    const ParamValue* v = given(k);
    return v ? v->text : fallback;
}

std::string PolicyParams::get_model_path(const std::string& what, const std::string& k) {
    const std::string value = get_string(k, "");
    // No model=: the predictor trained for the loaded model (predict/bundled_predictors.h), or an error that says
    // which exist and how to train one.
    if (value.empty()) return default_predictor_path(preset_);
    if (options_ && options_->resolve_model) return options_->resolve_model(preset_, value);
    std::error_code ec;
    if (!std::filesystem::exists(value, ec)) {
        if (const auto bundled = predictor_path_by_name(preset_, value)) return *bundled;
        // A bare name that is no predictor of the loaded model: say which names are (a path gets the loader's error).
        if (value.find('/') == std::string::npos && !value.ends_with(".safetensors") && !value.ends_with(".gguf"))
            fail("policy ", preset_, ": ", k, "=", value,
                 " is neither a file nor a predictor trained for the loaded model", " (", preset_,
                 " predictors for it: ", ready_predictor_names(preset_), ")");
    }
    return value;
}

void PolicyParams::check_all_used() const {
    for (const auto& [k, v] : values_)
        if (!used_.count(k))
            fail("policy ", preset_, ": key '", k, "' (", k, "=", v.text, ") does not apply with the other keys given");
}

namespace {
std::map<std::string, PresetInfo>& registry() {
    static std::map<std::string, PresetInfo> r;
    return r;
}
}  // namespace

void register_preset(PresetInfo info) {
    check_param_decls(info.name, info.params);
    registry()[info.name] = std::move(info);
}

const std::map<std::string, PresetInfo>& presets() {
    static const bool once = [] {
        register_all_presets();
        return true;
    }();
    (void)once;
    return registry();
}

void read_budget_rule(PolicyParams& p, Policy& policy) {
    const std::string rule = p.get_string("rule");
    Rule r;
    if (rule == "head")
        r.kind = Rule::Kind::kHeadBudget;
    else if (rule == "layer")
        r.kind = Rule::Kind::kLayerBudget;
    else if (rule == "global")
        r.kind = Rule::Kind::kGlobalBudget;
    else if (rule == "threshold")
        r.kind = Rule::Kind::kThreshold;
    else
        fail("policy ", p.preset(), ": rule='", rule, "' is not head, layer, global or threshold");
    if (r.kind == Rule::Kind::kThreshold) {
        require(p.has("tau"), "policy ", p.preset(), ": rule=threshold needs tau=<number>");
        r.tau = p.get_double("tau", 0);
    } else {
        const std::string size_key = p.declares("capacity") ? "capacity" : "budget";
        require(!(p.has("ratio") && p.has(size_key)), "policy ", p.preset(), ": give ratio or ", size_key,
                ", not both");
        r.ratio = p.get_ratio("ratio");
        r.budget = p.get_int(size_key, -1);
        r.safeguard = p.get_double("safeguard");
    }
    policy.compression = r;
    const int64_t every = p.get_int("every", r.budget > 0 ? 1 : 0);
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
        require(timing == "at_write" ? w == 0 : w > 0, "policy ", p.preset(), ": timing=", timing,
                timing == "at_write" ? " takes no window" : " needs window > 0");
        policy.window = static_cast<int>(w);
    } else {
        // A protected local window beside the budget: each head keeps B = s + w + k (KVpop eq. 1), the rule ranking
        // only the entries beyond the sinks and the window.
        policy.window = static_cast<int>(p.get_int("window", policy.window));
    }
    policy.sinks = static_cast<int>(p.get_int("sinks"));
}

namespace {
std::map<std::string, SelectionInfo>& selection_registry() {
    static std::map<std::string, SelectionInfo> r;
    return r;
}

template <class Info>
std::string known_names(const std::map<std::string, Info>& m) {
    std::string names;
    for (const auto& [n, i] : m) names += (names.empty() ? "" : ", ") + n;
    return names;
}
}  // namespace

void register_selection(SelectionInfo info) {
    check_param_decls(info.name, info.params);
    selection_registry()[info.name] = std::move(info);
}

const std::map<std::string, SelectionInfo>& selections() {
    (void)presets();  // registration of presets and selections happens together
    return selection_registry();
}

void check_policy_fits(const Policy& p, int64_t n_ctx) {
    if (p.compression.budget > n_ctx)
        fail("policy ", p.name, ": budget=", p.compression.budget, " is larger than the context of ", n_ctx, " tokens");
    if (p.window > n_ctx)
        fail("policy ", p.name, ": window=", p.window, " is larger than the context of ", n_ctx, " tokens");
    if (p.sinks > n_ctx)
        fail("policy ", p.name, ": sinks=", p.sinks, " is larger than the context of ", n_ctx, " tokens");
    // A head keeps B = s + w + k: sinks, window and (for a per-head rule) the budget beyond them.
    const bool per_head =
        p.compression.kind == Rule::Kind::kHeadBudget || p.compression.kind == Rule::Kind::kLayerBudget;
    const int64_t k = per_head && p.compression.budget > 0 ? p.compression.budget : 0;
    const int64_t B = static_cast<int64_t>(p.sinks) + p.window + k;
    if (B > n_ctx)
        fail("policy ", p.name, ": sinks + window + budget = ", p.sinks, " + ", p.window, " + ", k, " = ", B,
             " entries per head is larger than the context of ", n_ctx, " tokens");
}

Policy parse_policy(const std::string& spec, const PolicyParseOptions& options) {
    std::vector<SpecPart> parts = split_policy_spec(spec);
    const auto& all = presets();
    const auto& sels = selections();
    // A selection alone reads the full cache.
    if (sels.count(parts[0].name)) {
        parts[0].joiner = '+';
        parts.insert(parts.begin(), SpecPart{"full", {}, 0, "full"});
    }
    // The preset (one part, or an admission '>' an eviction), then at most one read-time selection after '+'.
    const size_t n_selections =
        std::count_if(parts.begin(), parts.end(), [](const SpecPart& p) { return p.joiner == '+'; });
    const size_t n_admissions =
        std::count_if(parts.begin(), parts.end(), [](const SpecPart& p) { return p.joiner == '>'; });
    require(n_selections <= 1, "policy '", spec, "': at most one read-time selection may follow the preset");
    require(n_admissions <= 1, "policy '", spec, "': at most one admission ('>') in front of an eviction");
    require(n_admissions == 0 || parts[1].joiner == '>', "policy '", spec,
            "': the admission ('>') goes in front of the eviction, before the '+' selection");
    auto make = [&](const SpecPart& part) {
        auto it = all.find(part.name);
        if (it == all.end())
            fail("unknown policy '", part.name, "' (known: ", known_names(all),
                 "; read-time selections after '+': ", known_names(sels), ")");
        PolicyParams params(part.name, it->second.params, {part.params.begin(), part.params.end()}, &options);
        Policy p = it->second.make(params);
        params.check_all_used();
        p.name = part.name;
        p.spec = part.text;
        return p;
    };
    Policy p;
    std::string name;
    if (n_admissions) {
        // Admission in front of eviction: "A>B".
        p = stack_admission(make(parts[0]), make(parts[1]));
        name = parts[0].name + ">" + parts[1].name;
    } else {
        p = make(parts[0]);
        name = p.name;
    }
    if (n_selections) {
        const SpecPart& sel = parts.back();
        auto si = sels.find(sel.name);
        require(si != sels.end(), "unknown read-time selection '", sel.name, "' after '+' (known: ", known_names(sels),
                ")");
        PolicyParams sp(sel.name, si->second.params, {sel.params.begin(), sel.params.end()}, &options);
        p.selection = si->second.make(sp);
        sp.check_all_used();
    }
    p.name = name;
    p.spec = spec;
    return p;
}

}  // namespace kvsieve
