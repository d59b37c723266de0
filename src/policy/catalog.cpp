#include "policy/catalog.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

namespace {
/// One preset or selection, as listed.
struct Entry {
    std::string name, summary, kind;  // kind: "preset" or "selection"
    const std::vector<ParamDecl>* params;
    std::string trained_defaults;  // PresetInfo::trained_defaults
};

std::vector<Entry> entries(const std::string& name) {
    std::vector<Entry> out;
    for (const auto& [n, p] : presets()) out.push_back({n, p.summary, "preset", &p.params, p.trained_defaults});
    for (const auto& [n, s] : selections()) out.push_back({n, s.summary, "selection", &s.params, ""});
    if (name.empty()) return out;
    for (const Entry& e : out)
        if (e.name == name) return {e};
    std::string known;
    for (const Entry& e : out) known += (known.empty() ? "" : ", ") + e.name;
    fail("unknown policy '", name, "' (known: ", known, ")");
}

/// The shared budget rule keys as budget_rule_params declares them by default.
const std::vector<ParamDecl>& canonical_group() {
    static const std::vector<ParamDecl> g = budget_rule_params();
    return g;
}

/// True when `d` is the shared group's key unchanged (listed once in the group's table, not in the preset's).
bool is_shared_unchanged(const ParamDecl& d) {
    if (d.group.empty()) return false;
    for (const ParamDecl& g : canonical_group())
        if (g.key == d.key) return g.default_text() == d.default_text() && g.range_text() == d.range_text();
    return false;
}

bool uses_group(const Entry& e) {
    return std::any_of(e.params->begin(), e.params->end(), [](const ParamDecl& d) { return !d.group.empty(); });
}

std::string cell(std::string s) {
    std::string out;
    for (char c : s) {
        if (c == '|')
            out += "\\|";
        else
            out += c;
    }
    return out;
}

std::string table(const std::vector<const ParamDecl*>& rows) {
    std::string s = "| key | type | range | default | meaning | source |\n|---|---|---|---|---|---|\n";
    for (const ParamDecl* d : rows)
        s += "| `" + d->key + "`" +
             (d->deprecated_alias.empty() ? "" : " (deprecated alias `" + d->deprecated_alias + "`)") + " | " +
             d->type_name() + " | " + cell(d->range_text()) + " | " + cell(d->default_text()) + " | " + cell(d->doc) +
             " | " + cell(d->source) + " |\n";
    return s;
}
}  // namespace

std::string policies_text(const std::string& name) {
    std::string s;
    for (const Entry& e : entries(name)) {
        s += e.name + (e.kind == "selection" ? " (read-time selection, after '+')" : "") + " — " + e.summary + "\n";
        if (!e.trained_defaults.empty()) s += "  precedence: " + e.trained_defaults + "\n";
        if (e.params->empty()) s += "  (no keys)\n";
        for (const ParamDecl& d : *e.params) {
            s += "  " + d.key + std::string(d.key.size() < 15 ? 15 - d.key.size() : 1, ' ') + d.type_name() + " " +
                 d.range_text() + "; default " + d.default_text() +
                 (d.deprecated_alias.empty() ? "" : "; deprecated alias " + d.deprecated_alias) + "\n      " + d.doc +
                 " (" + d.source + ")\n";
        }
    }
    return s;
}

std::string policies_markdown(const std::string& name) {
    const std::vector<Entry> all = entries(name);
    std::string s;
    std::string users;
    for (const Entry& e : all)
        if (uses_group(e)) users += (users.empty() ? "`" : ", `") + e.name + "`";
    if (!users.empty()) {
        s += "Budget rule keys, shared by " + users + " (a preset's own table lists the defaults it changes):\n\n";
        std::vector<const ParamDecl*> rows;
        for (const ParamDecl& d : canonical_group()) rows.push_back(&d);
        s += table(rows) + "\n";
    }
    for (const Entry& e : all) {
        std::vector<const ParamDecl*> rows;
        for (const ParamDecl& d : *e.params)
            if (!is_shared_unchanged(d)) rows.push_back(&d);
        const bool group = uses_group(e);
        std::string left_out;  // shared keys the preset replaces by its own (h2o: capacity for budget)
        for (const ParamDecl& g : canonical_group())
            if (std::none_of(e.params->begin(), e.params->end(), [&](const ParamDecl& d) { return d.key == g.key; }))
                left_out += (left_out.empty() ? " but `" : ", `") + g.key + "`";
        s += "**`" + e.name + "`**" + (e.kind == "selection" ? " (read-time selection, after `+`)" : "") + " — " +
             e.summary + (group ? "; the budget rule keys" + left_out : "") +
             (rows.empty() ? (group ? "." : "; no keys.") : (group ? ", and:" : ":")) + "\n\n";
        if (!e.trained_defaults.empty()) s += "Precedence: " + e.trained_defaults + ".\n\n";
        if (!rows.empty()) s += table(rows) + "\n";
    }
    return s;
}

std::string policies_json(const std::string& name) {
    nlohmann::json j{{"presets", nlohmann::json::array()}, {"selections", nlohmann::json::array()}};
    for (const Entry& e : entries(name)) {
        nlohmann::json params = nlohmann::json::array();
        for (const ParamDecl& d : *e.params) {
            nlohmann::json p{{"key", d.key},
                             {"type", d.type_name()},
                             {"range", d.range_text()},
                             {"default", nullptr},
                             {"default_note", d.default_note},
                             {"doc", d.doc},
                             {"source", d.source},
                             {"group", d.group},
                             {"deprecated_alias", d.deprecated_alias}};
            if (!d.default_value.empty()) p["default"] = d.default_value;
            if (d.type == ParamType::kInt) {
                p["min"] = d.imin;
                p["max"] = d.imax;
            } else if (d.type == ParamType::kReal) {
                p["min"] = std::isinf(d.rmin) ? nlohmann::json(nullptr) : nlohmann::json(d.rmin);
                p["max"] = std::isinf(d.rmax) ? nlohmann::json(nullptr) : nlohmann::json(d.rmax);
            } else if (d.type == ParamType::kRatio) {
                p["min"] = 0;
                p["max"] = 1;  // exclusive
            } else if (d.type == ParamType::kEnum) {
                p["choices"] = d.choices;
            }
            params.push_back(p);
        }
        j[e.kind == "preset" ? "presets" : "selections"].push_back(
            {{"name", e.name}, {"summary", e.summary}, {"params", params}});
        if (!e.trained_defaults.empty()) j["presets"].back()["trained_defaults"] = e.trained_defaults;
    }
    return j.dump(2) + "\n";
}

}  // namespace kvsieve
