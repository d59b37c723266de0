#pragma once
// The buffers a forward step works in, kept by the model from step to step so that a decode step allocates nothing.
#include <cstddef>
#include <cstdint>
#include <atomic>
#include <vector>

#include "kernels/matmul.h"
#include "model/rope.h"

namespace kvsieve {

/// Blocks of rows laid out one after another, the short ones (fewer than kGemmMinTokens rows) first, each group in
/// the given order: `order` lists the blocks in row order, offset[b] is block b's first row, n_short the rows of the
/// short blocks (the first n_short rows), total all rows.
struct ShortFirst {
    std::vector<size_t> order;
    std::vector<int64_t> offset;
    int64_t n_short = 0, total = 0;
};

/// Scratch of LlamaModel::forward_batch: the step's activations (N rows in all: x, xn, tmp [N][D]; q, q_pre,
/// att [N][Hq·d]; k, k_pre, v [N][Hkv·d]; g, u [N][n_ff]), the output head's rows and logits, the row layout, the RoPE
/// table and the matmul targets. Every buffer is resized before use and keeps its capacity, so it grows only when a
/// step has more rows (tokens) or segments than any step before it; a decode step after the first allocates nothing
/// here. Holds no state between steps.
struct ForwardScratch {
    std::vector<float> x, xn, q, k, v, att, g, u, tmp, q_pre, k_pre;
    std::vector<float> last, all;             ///< the rows whose logits are wanted [rows][D], their logits [rows][V]
    std::vector<int64_t> len, pos0, n_out;    ///< per segment: tokens, first position, rows of logits
    ShortFirst rows, outs;                    ///< the layout of the step's rows and of the output head's rows
    Rope::Table rope;                         ///< every row's RoPE angles
    std::vector<MatmulTarget> targets, part;  ///< the matrices of one shared-input product (all rows, one segment)
};

/// The one ForwardScratch of a model, lent to one forward step at a time: a step that finds it lent (another thread
/// running the same model) works in a scratch of its own, which allocates but computes the same.
class ForwardScratchSlot {
public:
    /// The slot's scratch if it is free (then lent until release()), else null.
    ForwardScratch* borrow() { return lent_.exchange(true, std::memory_order_acquire) ? nullptr : &scratch_; }
    void release() { lent_.store(false, std::memory_order_release); }

private:
    std::atomic<bool> lent_{false};
    ForwardScratch scratch_;
};

}  // namespace kvsieve
