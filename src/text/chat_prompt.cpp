#include "text/chat_prompt.h"

namespace kvsieve {

std::vector<int32_t> encode_conversation(const Tokenizer& tok, const ChatTemplate& t,
                                         const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
    const Vocab& v = tok.vocab();
    const ChatText text = render_marked(t, messages, add_generation_prompt);
    std::vector<int32_t> ids;
    if (v.add_bos && v.bos >= 0 && text.text.rfind(v.tokens[v.bos], 0) != 0) ids.push_back(v.bos);
    const std::vector<int32_t> body = tok.encode_marked(text.text, text.content);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
}

}  // namespace kvsieve
