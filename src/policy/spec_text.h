#pragma once
// The text of a policy spec, before any preset reads it: "NAME[:key=value,...]" parts, an admission in front of an
// eviction joined by '>', a read-time selection after '+' (for example "wgkv:model=m>snapkv:ratio=0.5+quest").
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kvsieve {

/// One preset or selection of a spec, as written.
struct SpecPart {
    std::string name;                                         ///< the preset's or selection's name
    std::vector<std::pair<std::string, std::string>> params;  ///< key=value items in the order written
    char joiner = 0;   ///< what joins it to the part before: 0 for the first part, '>' or '+'
    std::string text;  ///< the part as written, "NAME[:key=value,...]"
};

/// Splits a spec into its parts at '>' and '+' and each part's parameters at ','. Empty items (",,") are skipped.
/// Throws Error naming the part for an item that is not key=value or a key given twice in one part.
std::vector<SpecPart> split_policy_spec(const std::string& spec);

/// The spec the parts spell, joined as written ("NAME:key=value,...", joined by each part's joiner).
std::string spec_text(const std::vector<SpecPart>& parts);

/// The "key=value,..." text after a spec's colon, of the preset `name`, as a map (keys in sorted order). Throws Error
/// for an item that is not key=value or a key given twice.
std::map<std::string, std::string> parse_spec_params(const std::string& name, const std::string& rest);

}  // namespace kvsieve
