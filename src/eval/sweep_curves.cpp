#include "eval/sweep_curves.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

#include "policy/spec_text.h"

namespace kvsieve {

namespace {

/// What two specs must share to be one curve: the parts' names and their sets of keys.
std::string family_key(const std::vector<SpecPart>& parts) {
    std::string k;
    for (const auto& p : parts) {
        std::vector<std::string> keys;
        for (const auto& kv : p.params) keys.push_back(kv.first);
        std::sort(keys.begin(), keys.end());
        if (p.joiner) k += p.joiner;
        k += p.name + ":";
        for (const auto& key : keys) k += key + ",";
    }
    return k;
}

/// The spec of `parts` without the parameter `skip` (part index, key); no skip when skip.first is npos.
std::string spec_without(std::vector<SpecPart> parts, const std::pair<size_t, std::string>& skip) {
    if (skip.first < parts.size()) {
        auto& params = parts[skip.first].params;
        params.erase(
            std::remove_if(params.begin(), params.end(), [&](const auto& kv) { return kv.first == skip.second; }),
            params.end());
    }
    return spec_text(parts);
}

bool is_number(const std::string& s) {
    if (s.empty()) return false;
    char* end = nullptr;
    std::strtod(s.c_str(), &end);
    return end == s.c_str() + s.size();
}

std::string value_of(const SpecPart& p, const std::string& key) {
    for (const auto& kv : p.params)
        if (kv.first == key) return kv.second;
    return "";
}

}  // namespace

std::vector<SweepCurve> sweep_curves(const std::vector<std::string>& specs) {
    // Families in first-seen order; each spec is split once.
    struct Member {
        std::string spec;
        std::vector<SpecPart> parts;
    };
    std::vector<std::string> order;
    std::map<std::string, std::vector<Member>> families;
    for (const auto& s : specs) {
        if (s == "full") continue;
        std::vector<SpecPart> parts = split_policy_spec(s);
        const std::string k = family_key(parts);
        auto& members = families[k];
        if (members.empty()) order.push_back(k);
        if (std::none_of(members.begin(), members.end(), [&](const Member& m) { return m.spec == s; }))
            members.push_back({s, std::move(parts)});
    }
    struct Draft {
        std::vector<std::string> cells;
        std::string family;  // the spec without the swept key, or the spec of a one-cell curve
        std::string name;    // its first part's name
    };
    std::vector<Draft> drafts;
    for (const auto& k : order) {
        const auto& members = families[k];
        const auto& parsed0 = members[0].parts;
        // The swept key: the one whose removal leaves the fewest distinct specs (the largest curves); on a tie, one
        // whose values are all numbers (a checkpoint path is a setting, τ the swept value).
        std::pair<size_t, std::string> swept{std::string::npos, ""};
        size_t best = members.size();
        bool best_numeric = false;
        for (size_t i = 0; i < parsed0.size(); ++i)
            for (const auto& kv : parsed0[i].params) {
                const std::pair<size_t, std::string> cand{i, kv.first};
                std::vector<std::string> rest;
                bool numeric = true;
                for (const auto& m : members) {
                    const std::string r = spec_without(m.parts, cand);
                    if (std::find(rest.begin(), rest.end(), r) == rest.end()) rest.push_back(r);
                    numeric = numeric && is_number(value_of(m.parts[i], kv.first));
                }
                if (rest.size() < best || (rest.size() == best && numeric && !best_numeric && best < members.size())) {
                    swept = cand;
                    best = rest.size();
                    best_numeric = numeric;
                }
            }
        if (swept.first == std::string::npos) {
            for (const auto& m : members) drafts.push_back({{m.spec}, m.spec, m.parts[0].name});
            continue;
        }
        std::vector<Draft> groups;  // by the spec without the swept key, in first-seen order
        for (const auto& m : members) {
            const std::string r = spec_without(m.parts, swept);
            auto g = std::find_if(groups.begin(), groups.end(), [&](const Draft& d) { return d.family == r; });
            if (g == groups.end())
                groups.push_back({{m.spec}, r, m.parts[0].name});
            else
                g->cells.push_back(m.spec);
        }
        for (auto& g : groups) {
            if (g.cells.size() == 1) g.family = g.cells[0];
            drafts.push_back(std::move(g));
        }
    }
    // Drafts came grouped by family; put the curves back in the order of their first cell.
    auto first_index = [&](const Draft& d) {
        return std::find(specs.begin(), specs.end(), d.cells[0]) - specs.begin();
    };
    std::stable_sort(drafts.begin(), drafts.end(),
                     [&](const Draft& a, const Draft& b) { return first_index(a) < first_index(b); });
    std::vector<SweepCurve> curves;
    for (const auto& d : drafts) {
        const auto same = std::count_if(drafts.begin(), drafts.end(), [&](const Draft& o) { return o.name == d.name; });
        std::string title = same > 1 || d.name == "full" ? d.family : d.name;
        title.erase(std::remove(title.begin(), title.end(), '\''), title.end());
        curves.push_back({title, d.cells});
    }
    return curves;
}

}  // namespace kvsieve
