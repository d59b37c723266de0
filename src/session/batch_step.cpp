#include "session/batch_step.h"

#include "util/error.h"

namespace kvsieve {

size_t BatchStep::add(Session& session, const std::vector<int32_t>& ids, Session::StepKind kind,
                      std::vector<float>& logits, bool all_logits) {
    require(!ran_, "a batched step takes no new sequence after its forward (clear() it first)");
    require(model_ == nullptr || model_ == &session.model(), "a batched step runs the sequences of one model");
    for (const Item& it : items_) require(it.session != &session, "a sequence takes one step per batch");
    segs_.push_back(session.begin_step(ids, kind, logits, all_logits));  // throws before the session changes
    items_.push_back({&session, kind, false});
    model_ = &session.model();
    return items_.size() - 1;
}

void BatchStep::forward() {
    require(!ran_, "a batched step runs once (clear() it before the next)");
    if (items_.empty()) return;
    try {
        model_->forward_batch(segs_);
    } catch (...) {
        abort();
        throw;
    }
    ran_ = true;
}

void BatchStep::end(size_t i) {
    require(ran_ && i < items_.size() && !items_[i].ended, "step ", i, " of the batch has not run or has ended");
    items_[i].ended = true;
    items_[i].session->end_step(items_[i].kind);
}

void BatchStep::end_all() {
    for (size_t i = 0; i < items_.size(); ++i) end(i);
}

void BatchStep::abort() {
    if (!ran_)
        for (Item& it : items_) it.session->abort_step();
    clear();
}

void BatchStep::clear() {
    items_.clear();
    segs_.clear();
    model_ = nullptr;
    ran_ = false;
}

int64_t BatchStep::rows(bool decode) const {
    int64_t n = 0;
    for (const LlamaModel::Segment& s : segs_)
        if ((s.phase == StepPhase::kDecode) == decode) n += static_cast<int64_t>(s.tokens->size());
    return n;
}

}  // namespace kvsieve
