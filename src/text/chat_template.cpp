#include "text/chat_template.h"

#include <algorithm>

#include "io/gguf.h"
#include "text/unicode.h"
#include "text/vocab.h"
#include "util/error.h"

namespace kvsieve {

namespace {

constexpr const char* kQwenSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

/// Python's str.isspace for one code point (what Jinja's `trim` filter and str.strip() remove).
bool is_py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/// Jinja's `trim` / Python's strip(): the text without leading and trailing white space.
std::string trim(const std::string& s) {
    size_t begin = s.size(), end = 0, pos = 0;
    while (pos < s.size()) {
        const size_t at = pos;
        if (!is_py_space(utf8_decode(s, pos))) {
            if (begin == s.size()) begin = at;
            end = pos;
        }
    }
    return begin < end ? s.substr(begin, end - begin) : std::string();
}

/// The text without trailing white space (Python's rstrip()).
std::string trim_end(const std::string& s) {
    size_t end = 0, pos = 0;
    while (pos < s.size())
        if (!is_py_space(utf8_decode(s, pos))) end = pos;
    return s.substr(0, end);
}

/// The messages after an optional first system message must be user, assistant, user, ... (the [INST] and
/// Gemma templates raise otherwise). Returns the index of the first non-system message.
size_t check_alternation(const std::vector<ChatMessage>& m, const char* family) {
    const size_t first = !m.empty() && m[0].role == "system" ? 1 : 0;
    for (size_t i = first; i < m.size(); ++i) {
        const char* want = (i - first) % 2 == 0 ? "user" : "assistant";
        if (m[i].role != want)
            fail("chat template ", family, ": message ", i + 1, " has role '", m[i].role, "' where '", want,
                 "' is expected (after an optional first system message, roles must alternate user/assistant)");
    }
    return first;
}

ChatText render_chatml(const ChatTemplate& t, const std::vector<ChatMessage>& m, bool gen) {
    ChatText s;
    if (t.default_system && m[0].role != "system")
        s.add_template("<|im_start|>system\n" + *t.default_system + "<|im_end|>\n");
    for (const auto& msg : m) {
        s.add_template("<|im_start|>");
        s.add_content(msg.role);
        s.add_template("\n");
        s.add_content(msg.content);
        s.add_template("<|im_end|>\n");
    }
    if (gen) s.add_template("<|im_start|>assistant\n");
    return s;
}

ChatText render_llama3(const ChatTemplate& t, const std::vector<ChatMessage>& m, bool gen) {
    ChatText s;
    s.add_template(t.bos_token);
    for (const auto& msg : m) {
        s.add_template("<|start_header_id|>");
        s.add_content(msg.role);
        s.add_template("<|end_header_id|>\n\n");
        s.add_content(trim(msg.content));
        s.add_template("<|eot_id|>");
    }
    if (gen) s.add_template("<|start_header_id|>assistant<|end_header_id|>\n\n");
    return s;
}

ChatText render_llama2(const ChatTemplate& t, const std::vector<ChatMessage>& m) {
    const size_t first = check_alternation(m, "llama2");
    ChatText s;
    for (size_t i = first; i < m.size(); ++i) {
        // The template trims the whole text of the first user message, the system block included: with a system
        // message, the block starts the text and only the user message's end can be trimmed.
        const bool with_system = i == first && first == 1;
        if (m[i].role == "user") {
            s.add_template(t.bos_token + "[INST] ");
            if (with_system) {
                s.add_template("<<SYS>>\n");
                s.add_content(m[0].content);
                // An all-space user message: the trim reaches into the block's closing line breaks.
                const std::string user = trim_end(m[i].content);
                s.add_template(user.empty() ? "\n<</SYS>>" : "\n<</SYS>>\n\n");
                s.add_content(user);
            } else {
                s.add_content(trim(m[i].content));
            }
            s.add_template(" [/INST]");
        } else {
            s.add_template(" ");
            s.add_content(trim(m[i].content));
            s.add_template(" " + t.eos_token);
        }
    }
    return s;
}

ChatText render_mistral(const ChatTemplate& t, const std::vector<ChatMessage>& m) {
    const size_t first = check_alternation(m, "mistral");
    ChatText s;
    s.add_template(t.bos_token);
    for (size_t i = first; i < m.size(); ++i) {
        if (m[i].role == "user") {
            s.add_template(" [INST] ");
            if (i == first && first == 1) {
                s.add_content(m[0].content);
                s.add_template("\n\n");
            }
            s.add_content(m[i].content);
            s.add_template(" [/INST]");
        } else {
            s.add_template(" ");
            s.add_content(m[i].content);
            s.add_template(t.eos_token);
        }
    }
    return s;
}

ChatText render_gemma(const ChatTemplate& t, const std::vector<ChatMessage>& m, bool gen) {
    const size_t first = check_alternation(m, "gemma");
    ChatText s;
    s.add_template(t.bos_token);
    for (size_t i = first; i < m.size(); ++i) {
        s.add_template("<start_of_turn>" + std::string(m[i].role == "assistant" ? "model" : m[i].role) + "\n");
        if (i == first && first == 1) {
            s.add_content(m[0].content);
            s.add_template("\n\n");
        }
        s.add_content(trim(m[i].content));
        s.add_template("<end_of_turn>\n");
    }
    if (gen) s.add_template("<start_of_turn>model\n");
    return s;
}

/// Resolves Jinja's string escapes in the body of a literal.
std::string unescape_jinja(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        const char c = s[++i];
        switch (c) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            default: out += c; break;  // \' \" \\ and anything else: the character itself
        }
    }
    return out;
}

}  // namespace

std::string ChatTemplate::end_of_turn() const {
    switch (kind) {
        case ChatTemplateKind::kChatML: return "<|im_end|>";
        case ChatTemplateKind::kLlama3: return "<|eot_id|>";
        case ChatTemplateKind::kLlama2:
        case ChatTemplateKind::kMistral: return eos_token;
        case ChatTemplateKind::kGemma: return "<end_of_turn>";
    }
    return "";
}

std::string ChatTemplate::after_end_of_turn() const {
    return kind == ChatTemplateKind::kChatML || kind == ChatTemplateKind::kGemma ? "\n" : "";
}

std::string ChatTemplate::name() const {
    switch (kind) {
        case ChatTemplateKind::kChatML: return "chatml";
        case ChatTemplateKind::kLlama3: return "llama3";
        case ChatTemplateKind::kLlama2: return "llama2";
        case ChatTemplateKind::kMistral: return "mistral";
        case ChatTemplateKind::kGemma: return "gemma";
    }
    return "";
}

std::string chat_template_names() { return "chatml, llama3, llama2, mistral, qwen, gemma"; }

ChatTemplate chat_template_defaults(ChatTemplateKind kind) {
    ChatTemplate t;
    t.kind = kind;
    switch (kind) {
        case ChatTemplateKind::kChatML: t.eos_token = "<|im_end|>"; break;
        case ChatTemplateKind::kLlama3:
            t.bos_token = "<|begin_of_text|>";
            t.eos_token = "<|eot_id|>";
            break;
        case ChatTemplateKind::kLlama2:
        case ChatTemplateKind::kMistral:
            t.bos_token = "<s>";
            t.eos_token = "</s>";
            break;
        case ChatTemplateKind::kGemma:
            t.bos_token = "<bos>";
            t.eos_token = "<eos>";
            break;
    }
    return t;
}

ChatTemplate chat_template_by_name(const std::string& name) {
    if (name == "chatml") return chat_template_defaults(ChatTemplateKind::kChatML);
    if (name == "qwen") {
        ChatTemplate t = chat_template_defaults(ChatTemplateKind::kChatML);
        t.default_system = kQwenSystem;
        return t;
    }
    if (name == "llama3") return chat_template_defaults(ChatTemplateKind::kLlama3);
    if (name == "llama2") return chat_template_defaults(ChatTemplateKind::kLlama2);
    if (name == "mistral") return chat_template_defaults(ChatTemplateKind::kMistral);
    if (name == "gemma") return chat_template_defaults(ChatTemplateKind::kGemma);
    fail("unknown chat template '", name, "' (--chat-template takes one of: ", chat_template_names(), ")");
}

std::optional<std::string> chatml_default_system(const std::string& jinja) {
    static const std::string head = "<|im_start|>system";
    static const std::string end = "<|im_end|>";
    for (size_t at = jinja.find(head); at != std::string::npos; at = jinja.find(head, at + 1)) {
        if (at == 0 || (jinja[at - 1] != '\'' && jinja[at - 1] != '"')) continue;  // not the start of a literal
        const char quote = jinja[at - 1];
        size_t p = at + head.size();
        if (jinja.compare(p, 2, "\\n") == 0) {
            p += 2;
        } else if (p < jinja.size() && jinja[p] == '\n') {
            p += 1;
        } else {
            continue;
        }
        // The body up to <|im_end|>, inside the same literal (no unescaped closing quote before it).
        size_t q = p;
        bool closed = false;
        while (q < jinja.size() && jinja.compare(q, end.size(), end) != 0) {
            if (jinja[q] == '\\') {
                q += 2;
                continue;
            }
            if (jinja[q] == quote) {
                closed = true;
                break;
            }
            ++q;
        }
        if (closed || q >= jinja.size()) continue;
        return unescape_jinja(jinja.substr(p, q - p));
    }
    return std::nullopt;
}

ChatTemplate detect_chat_template(const std::string& jinja) {
    if (contains(jinja, "<|im_start|>")) {
        ChatTemplate t = chat_template_defaults(ChatTemplateKind::kChatML);
        t.default_system = chatml_default_system(jinja);
        return t;
    }
    if (contains(jinja, "<|start_header_id|>") && contains(jinja, "<|end_header_id|>"))
        return chat_template_defaults(ChatTemplateKind::kLlama3);
    if (contains(jinja, "<start_of_turn>")) return chat_template_defaults(ChatTemplateKind::kGemma);
    if (contains(jinja, "[INST]") && !contains(jinja, "[SYSTEM_PROMPT]")) {
        if (contains(jinja, "<<SYS>>")) return chat_template_defaults(ChatTemplateKind::kLlama2);
        if (contains(jinja, " [/INST]")) return chat_template_defaults(ChatTemplateKind::kMistral);
    }
    std::string start = jinja.substr(0, 60);
    for (char& c : start)
        if (c == '\n' || c == '\r') c = ' ';
    fail("the model's chat template is not one kvsieve knows (it starts \"", start, "\"); pass --chat-template NAME ",
         "with one of: ", chat_template_names());
}

ChatTemplate chat_template_for_model(const GGUFFile& f, const Vocab& v, const std::string& name) {
    ChatTemplate t;
    if (!name.empty()) {
        t = chat_template_by_name(name);
    } else {
        const GGUFValue* tmpl = f.find("tokenizer.chat_template");
        if (!tmpl)
            fail("the model has no chat template (tokenizer.chat_template); pass --chat-template NAME with one of: ",
                 chat_template_names());
        require(tmpl->type == GGUFValueType::STRING, "tokenizer.chat_template is not a string");
        t = detect_chat_template(tmpl->s);
    }
    if (v.bos >= 0 && v.bos < v.size()) t.bos_token = v.tokens[v.bos];
    if (v.eos >= 0 && v.eos < v.size()) t.eos_token = v.tokens[v.eos];
    return t;
}

void ChatText::add_template(const std::string& s) { text += s; }

void ChatText::add_content(const std::string& s) {
    if (s.empty()) return;
    if (!content.empty() && content.back().second == text.size())
        content.back().second += s.size();
    else
        content.emplace_back(text.size(), text.size() + s.size());
    text += s;
}

ChatText render_marked(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
    require(!messages.empty(), "cannot render an empty conversation");
    switch (t.kind) {
        case ChatTemplateKind::kChatML: return render_chatml(t, messages, add_generation_prompt);
        case ChatTemplateKind::kLlama3: return render_llama3(t, messages, add_generation_prompt);
        case ChatTemplateKind::kLlama2: return render_llama2(t, messages);
        case ChatTemplateKind::kMistral: return render_mistral(t, messages);
        case ChatTemplateKind::kGemma: return render_gemma(t, messages, add_generation_prompt);
    }
    fail("unknown chat template kind");
}

std::string render(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
    return render_marked(t, messages, add_generation_prompt).text;
}

std::string render(ChatTemplateKind kind, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
    return render(chat_template_defaults(kind), messages, add_generation_prompt);
}

ChatText render_continuation_marked(const ChatTemplate& t, const std::vector<ChatMessage>& history,
                                    const std::vector<ChatMessage>& added, bool add_generation_prompt) {
    std::vector<ChatMessage> all = history;
    all.insert(all.end(), added.begin(), added.end());
    ChatText full = render_marked(t, all, add_generation_prompt);
    if (history.empty()) return full;
    const std::string before = render(t, history, false);
    require(full.text.compare(0, before.size(), before) == 0, "chat template ", t.name(),
            ": adding messages changes the text of the earlier ones");
    ChatText out;
    out.text = full.text.substr(before.size());
    for (const auto& [b, e] : full.content)
        if (e > before.size()) out.content.emplace_back(std::max(b, before.size()) - before.size(), e - before.size());
    return out;
}

std::string render_continuation(const ChatTemplate& t, const std::vector<ChatMessage>& history,
                                const std::vector<ChatMessage>& added, bool add_generation_prompt) {
    return render_continuation_marked(t, history, added, add_generation_prompt).text;
}

}  // namespace kvsieve
