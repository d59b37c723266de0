#include "policy/spec_text.h"

#include "util/error.h"

namespace kvsieve {

namespace {

/// The key=value items of `rest` in the order written; throws as parse_spec_params.
std::vector<std::pair<std::string, std::string>> spec_items(const std::string& name, const std::string& rest) {
    std::vector<std::pair<std::string, std::string>> items;
    for (size_t start = 0; start <= rest.size();) {
        const size_t comma = rest.find(',', start);
        const std::string item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty()) {
            const size_t eq = item.find('=');
            require(eq != std::string::npos && eq > 0, "policy ", name, ": '", item, "' is not key=value");
            const std::string k = item.substr(0, eq);
            for (const auto& kv : items) require(kv.first != k, "policy ", name, ": key '", k, "' given twice");
            items.emplace_back(k, item.substr(eq + 1));
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return items;
}

}  // namespace

std::vector<SpecPart> split_policy_spec(const std::string& spec) {
    std::vector<SpecPart> parts;
    char joiner = 0;
    for (size_t start = 0;;) {
        const size_t end = spec.find_first_of(">+", start);
        SpecPart part;
        part.text = spec.substr(start, end == std::string::npos ? std::string::npos : end - start);
        part.joiner = joiner;
        const size_t colon = part.text.find(':');
        part.name = part.text.substr(0, colon);
        if (colon != std::string::npos) part.params = spec_items(part.name, part.text.substr(colon + 1));
        parts.push_back(std::move(part));
        if (end == std::string::npos) break;
        joiner = spec[end];
        start = end + 1;
    }
    return parts;
}

std::string spec_text(const std::vector<SpecPart>& parts) {
    std::string s;
    for (const auto& p : parts) {
        if (p.joiner) s += p.joiner;
        s += p.name;
        std::string params;
        for (const auto& [k, v] : p.params) params += (params.empty() ? "" : ",") + k + "=" + v;
        if (!params.empty()) s += ":" + params;
    }
    return s;
}

std::map<std::string, std::string> parse_spec_params(const std::string& name, const std::string& rest) {
    std::map<std::string, std::string> kv;
    for (auto& [k, v] : spec_items(name, rest)) kv.emplace(k, std::move(v));
    return kv;
}

}  // namespace kvsieve
