#pragma once
// The greedy pair-merge loop shared by SentencePiece-style BPE and byte-level BPE.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvsieve {

/// Splits `text` into UTF-8 characters, then repeatedly merges the adjacent pair with the highest priority
/// (ties: the leftmost) until no adjacent pair has one. priority(left, right) returns std::nullopt for pairs
/// that cannot merge. Returns the final pieces in order. (Sennrich et al. 2016 merge order; SentencePiece ranks
/// by piece score, GPT-2 by merge rank.)
std::vector<std::string> merge_pairs(
    const std::string& text, const std::function<std::optional<double>(std::string_view, std::string_view)>& priority);

}  // namespace kvsieve
