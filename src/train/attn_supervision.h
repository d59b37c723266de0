#pragma once
// Attention supervision for variable tracking: an auxiliary loss that tells two chosen heads where to look, so
// the two-head circuit that follows a chain of "VAR B = VAR A." links forms in a training budget where the
// language-model loss alone does not find it. Only src/train includes this header (it pulls in libtorch).
#include <cstdint>
#include <vector>

#include "text/tokenizer.h"
#include "train/mirror.h"

namespace kvsieve::train {

/// One supervised attention edge: in batch row `row`, query position `query` should attend to key `key`
/// (key ≤ query; positions are token indices of the row).
struct AttnTarget {
    int64_t row = 0, query = 0, key = 0;
};

/// The edges of the chain-following circuit in a batch of variable-tracking text (eval/tasks.h vt, train/data.h
/// chains). A statement is "VAR <lhs> = VAR <rhs>." or "VAR <lhs> = <value>.", an answer is the list of names
/// after a question's final ":" (" A, B, C.").
/// - carry: the statement's closing "." attends to the first token of its left-hand name, so the name to output
///   next sits where the name just output (the right-hand name) ends;
/// - lookup: the token before each answer name (":" or ",") attends to the closing "." of the statement whose
///   left-hand name is that answer — the statement that assigns the name just output (or the value) to it.
struct ChainTargets {
    std::vector<AttnTarget> carry, lookup;
};

/// Token ids the parser keys on: "▁VAR", "▁=", ".", ",", ":" as single vocabulary entries; and how "VAR" is
/// spelled right after a newline (a statement that opens a line, e.g. "V", "AR"; empty if `newline` is −1).
struct ChainTokenIds {
    int32_t var = -1, eq = -1, dot = -1, comma = -1, colon = -1, newline = -1;
    std::vector<int32_t> var_line_start;
};

/// Looks the ids up in `tok`'s vocabulary (SentencePiece "▁" or byte-level "Ġ" spellings). Throws Error naming
/// the piece when one of them is not a single token, since the parser could not find statements then.
ChainTokenIds chain_token_ids(const Tokenizer& tok);

/// Parses rows [B, T] (row-major token ids) into the circuit's edges. Answers are matched to statements by the
/// exact token sequence of the name; names that match no statement (or a later one) give no edge. Rows without
/// statements give none.
ChainTargets chain_targets(const std::vector<int64_t>& tokens, int64_t B, int64_t T, const ChainTokenIds& ids);

/// Result of attention_target_loss().
struct AttnTargetLoss {
    torch::Tensor loss;   ///< mean over edges of −log p(query → key), nats; a zero scalar when there are no edges
    double hit_rate = 0;  ///< fraction of edges whose key is the query's most-attended key (no gradient)
    int64_t edges = 0;
};

/// Cross-entropy between query head `head` of layer `layer`'s attention and the one-hot targets. `cap` is a
/// capture of the forward pass (MirrorHooks::capture, which fills q_post and lse); the probability is
/// p = exp(q·k/√d − lse) with the query and key after RoPE, the same logits the forward's softmax used (no
/// attention bias may have been applied). Throws Error for a layer or head out of range, an edge whose key is
/// after its query, or a capture of the blocked path (its lse carries no gradient).
AttnTargetLoss attention_target_loss(const std::vector<AttnTensors>& cap, int layer, int head,
                                     const std::vector<AttnTarget>& edges);

}  // namespace kvsieve::train
