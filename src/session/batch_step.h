#pragma once
// The one batched step: several sequences' steps (prompt pieces, extensions, decode tokens) run in one forward.
// The server's scheduler, the RULER evaluation and `kvsieve bench -b` all step through it, so the protocol of a step
// — begin each sequence's step, one LlamaModel::forward_batch over every row, end each step; abort them all when the
// forward fails — is written once.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/llama_model.h"
#include "session/session.h"

namespace kvsieve {

/// One batched forward step over several sessions of one model. Use: add() each session's step, forward() once,
/// then end() each step (by the index add() gave) or end_all(); clear() before the next step. Reused from step to
/// step it keeps its buffers, so a batch of the same size allocates nothing. Not thread-safe.
class BatchStep {
public:
    /// Adds `session`'s step of `ids` (a kind step, as Session::begin_step; a decode step is one token), whose logits
    /// land in `logits`: the last row's [n_vocab], or every row's [ids.size()][n_vocab] with `all_logits`. `ids` and
    /// `logits` must live until forward() returns. Returns the step's index. Throws Error for a session of another
    /// model or one already in this step, and what Session::begin_step throws (the step is then not added and the
    /// session unchanged).
    size_t add(Session& session, const std::vector<int32_t>& ids, Session::StepKind kind, std::vector<float>& logits,
               bool all_logits = false);

    /// Runs every added step in one LlamaModel::forward_batch (nothing when none was added). If it throws (a full KV
    /// pool: KVPoolExhausted, or another Error), every added step is aborted (Session::abort_step: each history is
    /// what its cache holds again), the batch is emptied and the exception propagates.
    void forward();

    /// Ends step `i` after forward() (Session::end_step: a prompt's last piece runs the after-prefill step and
    /// compresses; a held piece's admissions are judged later). Throws Error for an index not added, and what
    /// Session::end_step throws (a KVPoolExhausted while compressing, for one); the other steps are not affected.
    void end(size_t i);
    /// end() of every step in order; the first exception propagates (the steps after it are not ended).
    void end_all();

    /// Aborts every added step that forward() has not run (Session::abort_step) and empties the batch; for a caller
    /// whose add() of a later session threw.
    void abort();
    /// Forgets the steps (after they ended), keeping the buffers.
    void clear();

    size_t size() const { return items_.size(); }
    /// Rows of the step of this kind: decode tokens, or prompt / extension tokens.
    int64_t decode_rows() const { return rows(true); }
    int64_t prefill_rows() const { return rows(false); }

private:
    struct Item {
        Session* session = nullptr;
        Session::StepKind kind = Session::StepKind::kDecode;
        bool ended = false;
    };
    std::vector<Item> items_;
    std::vector<LlamaModel::Segment> segs_;
    const LlamaModel* model_ = nullptr;
    bool ran_ = false;
    int64_t rows(bool decode) const;
};

}  // namespace kvsieve
