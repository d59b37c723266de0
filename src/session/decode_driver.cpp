#include "session/decode_driver.h"

#include <algorithm>

#include "model/llama_model.h"
#include "model/sampler.h"
#include "session/session.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kEndToken:
        case FinishReason::kStopString: return "stop";
        case FinishReason::kMaxTokens:
        case FinishReason::kContextFull: return "length";
        case FinishReason::kNone: break;
    }
    return "";
}

DecodeDriver::DecodeDriver(const Tokenizer& tok, Sampler& sampler, StopRules rules)
    : tok_(tok), sampler_(sampler), rules_(std::move(rules)), stops_(rules_.stop_strings) {
    require(rules_.max_tokens >= 0, "max_tokens must be ≥ 0, got ", rules_.max_tokens);
}

bool DecodeDriver::is_end(int32_t id) const {
    const auto& ends = rules_.end_tokens;
    return tok_.is_eog(id) || std::find(ends.begin(), ends.end(), id) != ends.end();
}

std::string DecodeDriver::release() {
    std::string rest = stops_.push(utf8_.finish());
    rest += stops_.finish();
    return rest;
}

std::string DecodeDriver::finish(FinishReason reason) {
    require(reason != FinishReason::kNone, "an answer cannot finish without a reason");
    require(!finished(), "the answer has finished already (", finish_reason_name(reason_), ")");
    reason_ = reason;
    std::string rest = release();
    if (stops_.stopped() && reason_ != FinishReason::kEndToken) reason_ = FinishReason::kStopString;
    return rest;
}

DecodeStep DecodeDriver::next(const float* logits, int n_vocab, int64_t positions_left) {
    require(!finished(), "the answer has finished (", finish_reason_name(reason_), "); nothing more is sampled");
    DecodeStep st;
    st.token = sampler_.sample(logits, n_vocab);
    tokens_.push_back(st.token);
    st.end_token = is_end(st.token);
    if (!st.end_token) {
        st.piece = tok_.token_to_piece(st.token);
        st.text = stops_.push(utf8_.push(st.piece));
    }
    FinishReason reason = FinishReason::kNone;
    if (st.end_token) {
        reason = FinishReason::kEndToken;
    } else if (stops_.stopped()) {
        reason = FinishReason::kStopString;
    } else if (generated() >= rules_.max_tokens) {
        reason = FinishReason::kMaxTokens;
    } else if (positions_left <= 0) {
        reason = FinishReason::kContextFull;
    }
    if (reason != FinishReason::kNone) {
        st.text += finish(reason);
        st.finish = reason_;
    }
    return st;
}

DecodeRun decode_session(Session& session, DecodeDriver& driver, std::vector<float>& logits, RunLast run_last,
                         const std::function<void(const DecodeStep&)>& on_step) {
    DecodeRun run;
    if (driver.rules().max_tokens == 0) {
        driver.finish(FinishReason::kMaxTokens);
        run.reason = driver.finish_reason();
        return run;
    }
    const int n_vocab = session.model().config().n_vocab;
    require(static_cast<int64_t>(logits.size()) == n_vocab, "decoding needs the next token's ", n_vocab,
            " logits, got ", logits.size());
    for (;;) {
        const DecodeStep st = driver.next(logits.data(), n_vocab, session.n_ctx() - session.n_tokens());
        if (on_step) on_step(st);
        if (st.finish == FinishReason::kNone) {
            session.decode(st.token, logits);
            continue;
        }
        run.reason = st.finish;
        const bool wanted = run_last == RunLast::kYes || (run_last == RunLast::kUnlessEndToken && !st.end_token);
        if (st.finish == FinishReason::kContextFull) {
            run.context_full = true;
            run.logits_current = false;
        } else if (!wanted) {
            run.logits_current = false;
        } else if (session.n_tokens() < session.n_ctx()) {
            session.decode(st.token, logits);
        } else {
            run.context_full = true;
            run.logits_current = false;
        }
        return run;
    }
}

}  // namespace kvsieve
