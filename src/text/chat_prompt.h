#pragma once
// The token ids a conversation starts from: the rendered chat template, its markers tokenized as special tokens and
// the messages as plain text.
#include <cstdint>
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace kvsieve {

/// Ids of render(t, messages, add_generation_prompt) tokenized with the template's markers as special tokens and
/// the messages' text as plain text (Tokenizer::encode_marked: a message that spells "<|im_end|>" cannot close its
/// turn), after the vocabulary's BOS when it asks for one and the text does not start with the BOS
/// text already (Llama-3, Llama-2, Mistral and Gemma templates write it). Throws Error as render() (empty
/// conversation, roles out of turn) or as Tokenizer::encode (invalid UTF-8).
std::vector<int32_t> encode_conversation(const Tokenizer& tok, const ChatTemplate& t,
                                         const std::vector<ChatMessage>& messages, bool add_generation_prompt);

}  // namespace kvsieve
