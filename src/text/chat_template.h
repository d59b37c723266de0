#pragma once
// Chat templates: the prompt text an instruction-tuned model was trained on, for a conversation of messages.
//
// A GGUF file carries its template as Jinja source (tokenizer.chat_template). kvsieve does not run Jinja: it
// recognises the family of the template by distinctive substrings and renders that family's format with its
// own code, producing the same string the published template produces. Supported families and the names
// `--chat-template NAME` accepts:
//
//   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n ... <|im_start|>assistant\n   (Qwen2/2.5/3, SmolLM2, Hermes)
//   qwen     chatml with Qwen2.5's default system message "You are Qwen, created by Alibaba Cloud. You are a
//            helpful assistant." used when the conversation has none
//   llama3   <|begin_of_text|><|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ...   (Llama 3)
//   llama2   <s>[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] ANSWER </s><s>[INST] ...       (Llama 2 chat)
//   mistral  <s> [INST] SYSTEM\n\nUSER [/INST] ANSWER</s> [INST] ...            (Mistral 7B Instruct v0.1/v0.2)
//   gemma    <bos><start_of_turn>user\nSYSTEM\n\nUSER<end_of_turn>\n<start_of_turn>model\n ...       (Gemma 2/3)
//
// "Qwen" is not a kind of its own: it is ChatML plus a default system message (ChatTemplate::default_system).
// Detection extracts that default from any ChatML template text that has one (Qwen2: "You are a helpful
// assistant.", Qwen2.5: "You are Qwen, ...", SmolLM2: "You are a helpful AI assistant named SmolLM, trained by
// Hugging Face"), so such models get it exactly as their template would add it.
//
// BOS: the Llama-3, Llama-2, Mistral and Gemma templates write the `bos_token` variable into the text (and the
// Llama-2 / Mistral ones `eos_token` after each answer). render() does the same, with the token texts taken from
// the model's vocabulary (chat_template_for_model), so the string equals the Jinja output. Whoever tokenizes it
// must therefore parse special tokens and must not add another BOS when the text already starts with the BOS
// text; ChatML text carries no BOS, and the tokenizer adds one only if the vocabulary asks (add_bos_token).
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvsieve {

class GGUFFile;
struct Vocab;

/// The prompt formats kvsieve renders (see the file comment for the exact shapes).
enum class ChatTemplateKind {
    kChatML,   ///< <|im_start|> / <|im_end|> (also Qwen, with a default system message)
    kLlama3,   ///< <|start_header_id|> / <|end_header_id|> / <|eot_id|>, contents trimmed
    kLlama2,   ///< [INST] with the system message in <<SYS>> inside the first user message, BOS before each [INST]
    kMistral,  ///< " [INST] " with the system message and "\n\n" before the first user message, one BOS
    kGemma,    ///< <start_of_turn> / <end_of_turn>, assistant called "model", system message before the first user
};

/// One message of a conversation. role: "system", "user" or "assistant" (ChatML and Llama-3 write any role as it
/// is; the [INST] and Gemma formats accept an optional first system message, then user and assistant in turn).
struct ChatMessage {
    std::string role;
    std::string content;
};

/// A chat format with the values its Jinja template reads besides the messages.
struct ChatTemplate {
    ChatTemplateKind kind = ChatTemplateKind::kChatML;
    /// ChatML only: the system message the template adds when the conversation does not start with one
    /// (nullopt: none is added).
    std::optional<std::string> default_system;
    std::string bos_token;  ///< text of the template's bos_token variable (Llama-3 / Llama-2 / Mistral / Gemma)
    std::string eos_token;  ///< text of eos_token (written after each answer by Llama-2 and Mistral)

    /// The text that ends an assistant turn, where generation stops: "<|im_end|>", "<|eot_id|>", eos_token
    /// ("</s>") for Llama-2 and Mistral, "<end_of_turn>".
    std::string end_of_turn() const;
    /// What the template writes after end_of_turn() when it closes an assistant message: "\n" for ChatML and
    /// Gemma, "" otherwise.
    std::string after_end_of_turn() const;
    /// The --chat-template name of the format: "chatml", "llama3", "llama2", "mistral", "gemma" ("qwen" is
    /// reported as "chatml" plus its default system message).
    std::string name() const;
};

/// The names --chat-template accepts, comma-separated: "chatml, llama3, llama2, mistral, qwen, gemma".
std::string chat_template_names();

/// The family's format with its usual token texts: ChatML "<|im_end|>" (no BOS), Llama-3 "<|begin_of_text|>",
/// Llama-2 and Mistral "<s>" / "</s>", Gemma "<bos>" / "<eos>"; no default system message.
ChatTemplate chat_template_defaults(ChatTemplateKind kind);

/// The format of a --chat-template name (case-sensitive, see chat_template_names()); "qwen" is ChatML with
/// Qwen2.5's default system message. Throws Error naming the accepted names for any other name.
ChatTemplate chat_template_by_name(const std::string& name);

/// Recognises the family of a Jinja chat template by its distinctive substrings: "<|im_start|>" → ChatML (with
/// the default system message chatml_default_system finds), "<|start_header_id|>" → Llama-3,
/// "<start_of_turn>" → Gemma, "[INST]" with "<<SYS>>" → Llama-2, "[INST]" with " [/INST]" → Mistral. Token
/// texts are the family defaults. Throws Error for any other text (or "[SYSTEM_PROMPT]"-style Mistral formats),
/// saying to pass --chat-template NAME and listing the names.
ChatTemplate detect_chat_template(const std::string& jinja);

/// The default system message of a ChatML template: the TEXT of a string literal of the form
/// '<|im_start|>system\nTEXT<|im_end|>' (the newline written as \n or as a real line break, either quote),
/// with Jinja's string escapes (\n \t \' \" \\) resolved. Such a literal is what the Qwen2, Qwen2.5 and SmolLM2
/// templates write when the first message is not a system message; a literal continued by `+ content` is not
/// one. nullopt when the template has none.
std::optional<std::string> chatml_default_system(const std::string& jinja);

/// The format for a model: chat_template_by_name(name) if name is not empty, else detect_chat_template of the
/// file's tokenizer.chat_template; bos_token / eos_token become the texts of the vocabulary's BOS / EOS tokens
/// when it has them. Throws Error when the file has no template and no name is given, or as the two above.
ChatTemplate chat_template_for_model(const GGUFFile& f, const Vocab& v, const std::string& name);

/// A rendered prompt: its text and where in it the text a client wrote lies (message contents and roles). The rest
/// is the template's own text, whose markers (<|im_start|>, <|eot_id|>, [INST], ...) are special tokens; a client's
/// text is plain text even where it spells a marker, so a message can never close its turn or open another.
struct ChatText {
    std::string text;
    /// Byte ranges [begin, end) of `text` written by the client, ascending and disjoint (adjacent pieces merged).
    std::vector<std::pair<size_t, size_t>> content;
    /// Appends template text (its markers are tokenized as special tokens).
    void add_template(const std::string& s);
    /// Appends client text (tokenized as plain text).
    void add_content(const std::string& s);
};

/// render() with the client's text marked (ChatText::content). Throws Error as render().
ChatText render_marked(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool add_generation_prompt);
/// render_continuation() with the client's text marked. Throws Error as render_continuation().
ChatText render_continuation_marked(const ChatTemplate& t, const std::vector<ChatMessage>& history,
                                    const std::vector<ChatMessage>& added, bool add_generation_prompt);

/// The conversation as the template's Jinja source renders it (add_generation_prompt: end with the opening of
/// an assistant turn, where the model's answer starts; the [INST] formats have none, the answer follows
/// "[/INST]"). Throws Error for an empty conversation and, in the [INST] and Gemma formats, for roles that do
/// not alternate user / assistant after an optional first system message (as their templates raise).
std::string render(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool add_generation_prompt);
/// render() with chat_template_defaults(kind).
std::string render(ChatTemplateKind kind, const std::vector<ChatMessage>& messages, bool add_generation_prompt);

/// The text that extends render(t, history, false) to render(t, history + added, add_generation_prompt): what a
/// chat feeds the model for a new turn when its cache holds the earlier ones (render(t, added, ...) when history
/// is empty). An answer the model generated ends with end_of_turn() already in the cache, so a caller prepends
/// after_end_of_turn() to this (and end_of_turn() first if the answer was cut off). Throws Error as render(), or
/// if adding messages would change the text of the earlier ones (not the case for the supported formats).
std::string render_continuation(const ChatTemplate& t, const std::vector<ChatMessage>& history,
                                const std::vector<ChatMessage>& added, bool add_generation_prompt);

}  // namespace kvsieve
