#include "policy/params.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

#include "util/error.h"

namespace kvsieve {

namespace {
std::string real_text(double x) {
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    std::string s = cat(x);
    return s;
}
}  // namespace

std::string ParamDecl::type_name() const {
    switch (type) {
        case ParamType::kInt: return "int";
        case ParamType::kReal: return "real";
        case ParamType::kRatio: return "ratio";
        case ParamType::kFlag: return "flag";
        case ParamType::kEnum: return "enum";
        case ParamType::kName: return "name";
    }
    return "?";
}

std::string ParamDecl::range_text() const {
    switch (type) {
        case ParamType::kInt: return cat("[", imin, ", ", imax, "]");
        case ParamType::kReal:
            if (std::isinf(rmin) && std::isinf(rmax)) return "any finite number";
            if (std::isinf(rmax)) return cat("[", real_text(rmin), ", inf)");
            if (std::isinf(rmin)) return cat("(-inf, ", real_text(rmax), "]");
            return cat("[", real_text(rmin), ", ", real_text(rmax), "]");
        case ParamType::kRatio: return "[0, 1)";
        case ParamType::kFlag: return "0 or 1";
        case ParamType::kEnum: {
            std::string s;
            for (const auto& c : choices) s += (s.empty() ? "" : " | ") + c;
            return s;
        }
        case ParamType::kName: return "text";
    }
    return "?";
}

std::string ParamDecl::default_text() const { return default_value.empty() ? default_note : default_value; }

namespace {
ParamDecl base(std::string key, ParamType t, std::string def, std::string doc, std::string source) {
    ParamDecl d;
    d.key = std::move(key);
    d.type = t;
    d.default_value = std::move(def);
    d.doc = std::move(doc);
    d.source = std::move(source);
    return d;
}
}  // namespace

ParamDecl int_param(std::string key, int64_t min, int64_t max, std::string def, std::string doc, std::string source) {
    ParamDecl d = base(std::move(key), ParamType::kInt, std::move(def), std::move(doc), std::move(source));
    d.imin = min;
    d.imax = max;
    return d;
}

ParamDecl real_param(std::string key, double min, double max, std::string def, std::string doc, std::string source) {
    ParamDecl d = base(std::move(key), ParamType::kReal, std::move(def), std::move(doc), std::move(source));
    d.rmin = min;
    d.rmax = max;
    return d;
}

ParamDecl ratio_param(std::string key, std::string def, std::string doc, std::string source) {
    return base(std::move(key), ParamType::kRatio, std::move(def), std::move(doc), std::move(source));
}

ParamDecl flag_param(std::string key, std::string def, std::string doc, std::string source) {
    return base(std::move(key), ParamType::kFlag, std::move(def), std::move(doc), std::move(source));
}

ParamDecl enum_param(std::string key, std::vector<std::string> choices, std::string def, std::string doc,
                     std::string source) {
    ParamDecl d = base(std::move(key), ParamType::kEnum, std::move(def), std::move(doc), std::move(source));
    d.choices = std::move(choices);
    return d;
}

ParamDecl name_param(std::string key, std::string def, std::string doc, std::string source) {
    return base(std::move(key), ParamType::kName, std::move(def), std::move(doc), std::move(source));
}

ParamDecl with_note(ParamDecl d, std::string note) {
    d.default_value.clear();
    d.default_note = std::move(note);
    return d;
}

ParamDecl with_default(ParamDecl d, std::string def) {
    d.default_value = std::move(def);
    d.default_note.clear();
    return d;
}

ParamDecl with_alias(ParamDecl d, std::string old_key) {
    d.deprecated_alias = std::move(old_key);
    return d;
}

std::vector<ParamDecl> merge_params(std::vector<ParamDecl> out, const std::vector<ParamDecl>& more) {
    for (const ParamDecl& m : more) {
        auto it = std::find_if(out.begin(), out.end(), [&](const ParamDecl& d) { return d.key == m.key; });
        ParamDecl own = m;
        own.group.clear();
        if (it != out.end())
            *it = own;
        else
            out.push_back(own);
    }
    return out;
}

std::vector<ParamDecl> budget_rule_params(const std::string& default_ratio, const std::string& default_rule,
                                          const std::string& default_sinks) {
    std::vector<ParamDecl> v{
        ratio_param("ratio", default_ratio,
                    "compression ratio: the fraction of scored entries removed (not with budget)",
                    "kvpress compression_ratio"),
        with_note(int_param("budget", 1, kMaxTokens, "",
                            "k: entries kept per KV head beyond the sinks and the window "
                            "(in total for rule=global); not with ratio",
                            "KVpop eq. 1, B = s + w + k"),
                  "none (ratio applies)"),
        enum_param("rule", {"head", "layer", "global", "threshold"}, default_rule,
                   "head: per-head budget; layer: AdaKV allocation in each layer; global: one ranking over all heads; "
                   "threshold: keep iff score ≥ tau",
                   "kvpress ScorerPress / AdaKVPress (Feng et al. 2024, Alg. 1)"),
        real_param("safeguard", 0, 1, "0.2", "rule=layer: fraction of each head's k it keeps before the layer competes",
                   "AdaKV Alg. 1 (kvpress alpha_safeguard)"),
        with_note(real_param("tau", -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
                             "", "threshold τ of rule=threshold: keep iff score ≥ τ", "KVzap Alg. 1"),
                  "required with rule=threshold"),
        with_note(int_param("every", 0, kMaxTokens, "", "decode steps between evictions (0: after the prompt only)",
                            "H2O Alg. 1 (1: every step)"),
                  "1 with budget, else 0"),
        with_note(enum_param("timing", {"at_write", "at_window_exit", "after_prefill", "every_n_decode_steps"}, "",
                             "when the rule runs; at_write and at_window_exit need rule=threshold", "design.md §1"),
                  "every_n_decode_steps when every > 0, else after_prefill"),
        with_note(int_param("window", 0, kMaxTokens, "", "w: most recent entries always kept, beside the budget",
                            "KVpop eq. 1"),
                  "0; 128 with timing=at_window_exit"),
        int_param("sinks", 0, kMaxTokens, default_sinks, "s: first entries always kept", "StreamingLLM §3.2"),
    };
    for (auto& d : v) d.group = "budget rule";
    return v;
}

ParamValue parse_param_value(const std::string& owner, const ParamDecl& d, const std::string& text) {
    ParamValue v;
    v.text = text;
    auto bad = [&](const std::string& why) {
        fail("policy ", owner, ": ", d.key, "='", text, "' ", why, " (", d.type_name(), " ", d.range_text(), ")");
    };
    // below: the value is under the range (else over it).
    auto outside = [&](bool below) {
        std::string hint;
        if (d.type == ParamType::kInt)
            hint = below ? (d.imin == 1 ? d.key + " must be positive" : cat(d.key, " must be ≥ ", d.imin))
                         : cat(d.key, " must be ≤ ", d.imax);
        fail("policy ", owner, ": ", d.key, "=", text, " is outside ", d.range_text(),
             hint.empty() ? std::string() : " (" + hint + ")");
    };
    if (text.empty() && d.type != ParamType::kName) bad("is empty");
    switch (d.type) {
        case ParamType::kInt:
        case ParamType::kFlag: {
            // Digits with an optional sign only: strtoll would also skip leading blanks.
            const char c0 = text[0];
            if (!(std::isdigit(static_cast<unsigned char>(c0)) || c0 == '-' || c0 == '+')) bad("is not an integer");
            errno = 0;
            char* end = nullptr;
            const long long x = std::strtoll(text.c_str(), &end, 10);
            if (end == text.c_str() || *end != '\0') bad("is not an integer");
            if (d.type == ParamType::kFlag) {
                if (errno == ERANGE || (x != 0 && x != 1)) bad("is not a flag");
            } else if (errno == ERANGE || x < d.imin || x > d.imax) {
                outside(x < d.imin);
            }
            v.i = x;
            return v;
        }
        case ParamType::kReal:
        case ParamType::kRatio: {
            char* end = nullptr;
            const double x = std::strtod(text.c_str(), &end);
            if (std::isspace(static_cast<unsigned char>(text[0])) || end == text.c_str() || *end != '\0')
                bad("is not a number");
            if (!std::isfinite(x)) bad("is not a finite number");
            const bool in = d.type == ParamType::kRatio ? (x >= 0 && x < 1) : (x >= d.rmin && x <= d.rmax);
            if (!in) outside(x < d.rmin);
            v.r = x;
            return v;
        }
        case ParamType::kEnum:
            if (std::find(d.choices.begin(), d.choices.end(), text) == d.choices.end()) {
                std::string words;
                for (size_t i = 0; i < d.choices.size(); ++i)
                    words += (i == 0 ? "" : i + 1 == d.choices.size() ? " or " : ", ") + d.choices[i];
                fail("policy ", owner, ": ", d.key, "='", text, "' is not ", words);
            }
            return v;
        case ParamType::kName: return v;
    }
    return v;
}

void check_param_decls(const std::string& owner, const std::vector<ParamDecl>& decls) {
    std::set<std::string> seen;
    for (const ParamDecl& d : decls) {
        require(!d.key.empty() && seen.insert(d.key).second, "policy ", owner, ": key '", d.key, "' declared twice");
        if (!d.deprecated_alias.empty())
            require(seen.insert(d.deprecated_alias).second, "policy ", owner, ": deprecated alias '",
                    d.deprecated_alias, "' of key '", d.key, "' is declared twice");
        require(d.type != ParamType::kInt || d.imin <= d.imax, "policy ", owner, ": key '", d.key,
                "' has an empty range");
        require(d.type != ParamType::kEnum || !d.choices.empty(), "policy ", owner, ": key '", d.key,
                "' has no choices");
        if (!d.default_value.empty()) parse_param_value(owner, d, d.default_value);
    }
}

std::string param_keys_text(const std::vector<ParamDecl>& decls) {
    std::vector<std::string> keys;
    for (const auto& d : decls) keys.push_back(d.key);
    std::sort(keys.begin(), keys.end());
    std::string s;
    for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
    return s.empty() ? "none" : s;
}

}  // namespace kvsieve
