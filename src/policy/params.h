#pragma once
// Typed parameters of policy presets and read-time selections: each key a preset accepts is declared once (name,
// type, range, default, meaning, source), in the preset's own file; shared groups (the budget rule keys) are declared
// in one place and reused. A spec's values are checked against the declarations before anything is built, and
// `kvsieve policies` lists them (policy/catalog.h).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kvsieve {

/// The largest size in tokens or entries a key may take (sinks s, window w, budget k, chunk, …): 2^24, so that every
/// size and the sum B = s + w + k fit an `int`.
inline constexpr int64_t kMaxTokens = int64_t{1} << 24;

/// How a value is written and read.
enum class ParamType {
    kInt,    ///< decimal integer in [imin, imax]
    kReal,   ///< finite decimal number in [rmin, rmax] (NaN and ±inf are refused)
    kRatio,  ///< compression ratio: the fraction of entries removed, in [0, 1)
    kFlag,   ///< 0 or 1
    kEnum,   ///< one of `choices`
    kName,   ///< free text (a file, a predictor name, a list in the preset's own syntax)
};

/// One key of a preset or selection.
struct ParamDecl {
    std::string key;
    ParamType type = ParamType::kInt;
    int64_t imin = 0, imax = kMaxTokens;  ///< kInt: the closed range
    double rmin = 0, rmax = 0;            ///< kReal: the closed range (±infinity: unbounded)
    std::vector<std::string> choices;     ///< kEnum: the accepted words
    /// The default as a value of the key's type ("128", "0.5", "head"); empty when it has none or it depends on other
    /// keys (then `default_note` says how it is chosen: "required", "K/2 with budget=K, else 0", …).
    std::string default_value;
    std::string default_note;
    std::string doc;     ///< one line: what the key sets, in the field's terms
    std::string source;  ///< paper and section or equation, or the kvpress class it follows
    std::string group;   ///< the shared group it comes from ("budget rule"), empty for a preset's own key
    /// The key's former spelling, still accepted for one release (a spec using it prints a one-line deprecation
    /// warning once per process, util/deprecation.h); empty when the key was never renamed. Giving both spellings in
    /// one spec is an error.
    std::string deprecated_alias;

    /// "int", "real", "ratio", "flag", "enum", "name".
    std::string type_name() const;
    /// "[1, 16777216]", "[0, 1)", "any finite number", "0 or 1", "head | layer | global", "text".
    std::string range_text() const;
    /// default_value, or default_note when there is none.
    std::string default_text() const;
};

/// Builders of declarations (one line per key in a preset's file).
ParamDecl int_param(std::string key, int64_t min, int64_t max, std::string default_value, std::string doc,
                    std::string source);
ParamDecl real_param(std::string key, double min, double max, std::string default_value, std::string doc,
                     std::string source);
ParamDecl ratio_param(std::string key, std::string default_value, std::string doc, std::string source);
ParamDecl flag_param(std::string key, std::string default_value, std::string doc, std::string source);
ParamDecl enum_param(std::string key, std::vector<std::string> choices, std::string default_value, std::string doc,
                     std::string source);
ParamDecl name_param(std::string key, std::string default_value, std::string doc, std::string source);
/// The same declaration with a default that depends on other keys (default_value cleared, note set).
ParamDecl with_note(ParamDecl d, std::string note);
/// The same declaration with another literal default.
ParamDecl with_default(ParamDecl d, std::string default_value);
/// The same declaration, also accepting its former spelling `old_key` as a deprecated alias.
ParamDecl with_alias(ParamDecl d, std::string old_key);

/// `base` followed by `more`; an entry of `more` whose key is already in `base` replaces it there (so a preset can
/// change a shared key's default or range; the replacement is the preset's own key).
std::vector<ParamDecl> merge_params(std::vector<ParamDecl> base, const std::vector<ParamDecl>& more);

/// The budget rule keys read by read_budget_rule (policy.h): ratio, budget, rule, safeguard, tau, every, timing,
/// window, sinks. `default_ratio`, `default_rule` and `default_sinks` are the preset's defaults of those keys.
std::vector<ParamDecl> budget_rule_params(const std::string& default_ratio = "0.5",
                                          const std::string& default_rule = "head",
                                          const std::string& default_sinks = "0");

/// A checked value: what the text says for its key's type.
struct ParamValue {
    std::string text;  ///< as written in the spec
    int64_t i = 0;     ///< kInt, kFlag
    double r = 0;      ///< kReal, kRatio
};

/// Reads `text` as a value of `d` for preset or selection `owner`. Throws Error naming the owner, the key, the value
/// and the accepted range: not an integer or number (trailing characters included), integer overflow, NaN or ±inf,
/// outside the range, a word not among the choices, empty text.
ParamValue parse_param_value(const std::string& owner, const ParamDecl& d, const std::string& text);

/// Throws Error when a declaration list is malformed: a key or deprecated alias twice (or an alias equal to a key), a
/// literal default that its own type refuses, an empty range. Called when presets are registered.
void check_param_decls(const std::string& owner, const std::vector<ParamDecl>& decls);

/// "budget, every, ratio, …": the keys of `decls` in sorted order (deprecated aliases left out).
std::string param_keys_text(const std::vector<ParamDecl>& decls);

}  // namespace kvsieve
