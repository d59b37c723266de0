// Chat templates: recognising a Jinja template's family and its default system message from any text, and
// rendering conversations whose roles and contents come from the input.
#include "text/chat_template.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        kvsieve::chatml_default_system(text);
        kvsieve::detect_chat_template(text);
    } catch (const kvsieve::Error&) {}
    // A conversation from the input: messages split at '\x01', role from each message's first byte.
    static const char* roles[] = {"system", "user", "assistant", "tool"};
    std::vector<kvsieve::ChatMessage> msgs;
    size_t start = 0;
    while (start <= text.size() && msgs.size() < 16) {
        size_t end = text.find('\x01', start);
        if (end == std::string::npos) end = text.size();
        const std::string part = text.substr(start, end - start);
        msgs.push_back({roles[part.empty() ? 1 : static_cast<unsigned char>(part[0]) % 4], part});
        start = end + 1;
    }
    for (auto kind :
         {kvsieve::ChatTemplateKind::kChatML, kvsieve::ChatTemplateKind::kLlama3, kvsieve::ChatTemplateKind::kLlama2,
          kvsieve::ChatTemplateKind::kMistral, kvsieve::ChatTemplateKind::kGemma}) {
        try {
            kvsieve::render(kind, msgs, size % 2 == 0);
            if (msgs.size() > 1) {
                const std::vector<kvsieve::ChatMessage> head(msgs.begin(), msgs.end() - 1),
                    tail(msgs.end() - 1, msgs.end());
                kvsieve::render_continuation(kvsieve::chat_template_defaults(kind), head, tail, true);
            }
        } catch (const kvsieve::Error&) {}
    }
    return 0;
}
