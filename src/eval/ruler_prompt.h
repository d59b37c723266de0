#pragma once
// The token ids a RULER example is fed as: raw (the context and the question as they are) or in kvpress's chat
// format (the context inside the model's chat template, the question after the end of the user turn).
#include <cstdint>
#include <string>
#include <vector>

#include "text/chat_template.h"

namespace kvsieve {

class Tokenizer;
struct TaskExample;

/// How a RULER example becomes a prompt.
enum class RulerFormat {
    /// The context text (after the vocabulary's BOS when it asks for one), then the question text with its answer
    /// prefix; no special-token parsing.
    kRaw,
    /// NVIDIA kvpress's pipeline (KVPressTextGenerationPipeline.preprocess, kvpress 0.5.5): the chat template
    /// renders one user turn whose content is the context followed by a separator, with the generation prompt; the
    /// rendered text is split at the separator. Context ids: the part before (system prompt, user-turn opening,
    /// context); question ids: question + the part after (end of the user turn, assistant opening) + answer prefix.
    /// Both are tokenized without added special tokens and with special-token texts parsed (as a Hugging Face
    /// tokenizer matches its added tokens in any text).
    kChat,
};

/// "raw" or "chat".
std::string ruler_format_name(RulerFormat f);
/// The format named "raw" or "chat"; throws Error naming both for any other text.
RulerFormat parse_ruler_format(const std::string& name);

/// The chat template's text around a context, split as kvpress splits it: render(t, {user: context + separator},
/// add_generation_prompt = true) cut at the separator, a line break followed by more '#' than the context holds
/// (kvpress uses "\n" and one '#' per context character; both occur nowhere else). `context` is the part before the
/// separator (e.g. ChatML: "<|im_start|>system\nSYSTEM<|im_end|>\n<|im_start|>user\nCONTEXT"), `suffix` the part
/// after ("<|im_end|>\n<|im_start|>assistant\n"). Throws Error if the rendered text does not hold the separator
/// exactly once.
struct ChatContextSplit {
    std::string context, suffix;
};
ChatContextSplit split_chat_context(const ChatTemplate& t, const std::string& context);

/// A RULER example's token ids. Query-agnostic runs prefill `context`, compress, then feed `question`.
struct RulerPromptIds {
    std::vector<int32_t> context, question;
};

/// The ids of `ex` in format `f` (see RulerFormat; `chat` is read only for kChat). Throws Error as
/// Tokenizer::encode (text that is not UTF-8) or split_chat_context.
RulerPromptIds ruler_prompt_ids(const Tokenizer& tok, const TaskExample& ex, RulerFormat f, const ChatTemplate& chat);

}  // namespace kvsieve
