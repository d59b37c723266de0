#include "eval/ruler_prompt.h"

#include <algorithm>

#include "eval/tasks.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {

std::string ruler_format_name(RulerFormat f) { return f == RulerFormat::kChat ? "chat" : "raw"; }

RulerFormat parse_ruler_format(const std::string& name) {
    if (name == "raw") return RulerFormat::kRaw;
    if (name == "chat") return RulerFormat::kChat;
    fail("prompt format '", name, "' is not chat or raw");
}

ChatContextSplit split_chat_context(const ChatTemplate& t, const std::string& context) {
    // More '#' than the context has characters: the context cannot hold the separator.
    const std::string separator = "\n" + std::string(context.size() + 1, '#');
    const std::string text = render(t, {{"user", context + separator}}, true);
    const size_t at = text.find(separator);
    require(at != std::string::npos && text.find(separator, at + 1) == std::string::npos, "chat format: the ", t.name(),
            " template's text does not hold the context's separator exactly once");
    return {text.substr(0, at), text.substr(at + separator.size())};
}

RulerPromptIds ruler_prompt_ids(const Tokenizer& tok, const TaskExample& ex, RulerFormat f, const ChatTemplate& chat) {
    RulerPromptIds p;
    if (f == RulerFormat::kRaw) {
        p.context = tok.encode(ex.context(), true, false);
        p.question = tok.encode(ex.question, false, false);
        return p;
    }
    const ChatContextSplit s = split_chat_context(chat, ex.context());
    p.context = tok.encode(s.context, false, true);
    p.question = tok.encode(ex.question_only() + s.suffix + ex.answer_prefix, false, true);
    return p;
}

}  // namespace kvsieve
