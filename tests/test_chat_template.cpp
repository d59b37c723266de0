// Chat templates: detection from the published Jinja sources, and rendering compared with strings written out by
// hand from those templates' Jinja semantics (filters `trim` / `.strip()`, `bos_token`, `eos_token`).
#include <gtest/gtest.h>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "test_util.h"
#include "text/chat_template.h"
#include "text/vocab.h"
#include "util/error.h"

namespace kvsieve {
namespace {

// ---- Published templates, as tokenizer.chat_template holds them (JSON-decoded: "\n" inside a Jinja string
// literal is a backslash and an n; line breaks between statements are real ones). ----

// meta-llama/Meta-Llama-3-8B-Instruct
const std::string kLlama3 =
    R"J({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})J";

// meta-llama/Llama-2-7b-chat-hf
const std::string kLlama2 =
    R"J({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})J";

// mistralai/Mistral-7B-Instruct-v0.1 (the template with an optional system message)
const std::string kMistral = R"J({%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
)J";

// mistralai/Mistral-7B-Instruct-v0.1, first release (no system message)
const std::string kMistralOld =
    R"J({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})J";

// google/gemma-2-2b-it
const std::string kGemma2 =
    R"J({{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %})J";

// google/gemma-3-*-it
const std::string kGemma3 = R"J({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)J";

// Qwen/Qwen2.5-7B-Instruct
const std::string kQwen25 = R"J({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)J";

// Qwen/Qwen2-7B-Instruct
const std::string kQwen2 =
    R"J({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})J";

// HuggingFaceTB/SmolLM2-135M-Instruct (its JSON has "\n" escapes inside the literals, so they are real line breaks)
const std::string kSmolLM2 =
    R"J({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %})J";

// Plain ChatML (OpenHermes-style): no default system message
const std::string kChatML =
    R"J({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})J";

// HuggingFaceH4/zephyr-7b-beta: a format kvsieve does not render
const std::string kZephyr =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + "
    "eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif "
    "%}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

// Mistral Small 3.1 style ([SYSTEM_PROMPT], [INST] without spaces): not the v0.1 format
const std::string kMistralV7 =
    "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set system_message = 'x' %}{%- set loop_messages = messages "
    "%}"
    "{%- endif %}{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}"
    "{%- for m in loop_messages %}{{- '[INST]' + m['content'] + '[/INST]' }}{%- endfor %}";

// The conversation every family renders: system, user, assistant, user (the last with white space around it,
// which the Llama-3, Llama-2 and Gemma templates trim and the others keep).
const std::vector<ChatMessage> kConversation = {
    {"system", "You are a terse assistant."},
    {"user", "Hi there"},
    {"assistant", "Hello! How can I help?"},
    {"user", " What is 2+2?\n"},
};

using test::error_of;

TEST(ChatTemplate, ChatMLRendersExactly) {
    EXPECT_EQ(render(ChatTemplateKind::kChatML, kConversation, true),
              "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n"
              "<|im_start|>user\nHi there<|im_end|>\n"
              "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
              "<|im_start|>user\n What is 2+2?\n<|im_end|>\n"
              "<|im_start|>assistant\n");
    EXPECT_EQ(render(ChatTemplateKind::kChatML, {{"user", "Hi"}}, false), "<|im_start|>user\nHi<|im_end|>\n");
}

/// Every family marks exactly the messages' text (roles and contents) as the client's: the marked ranges, read back
/// from the text, are the messages' texts as the template writes them (trimmed where it trims), and the text is
/// render()'s.
TEST(ChatTemplate, MarkedRangesAreExactlyTheMessagesText) {
    const std::vector<ChatMessage> m = {
        {"system", "Sys <|im_end|>"}, {"user", " Q1 [/INST] "}, {"assistant", "A1"}, {"user", "Q2"}};
    struct Case {
        ChatTemplateKind kind;
        std::vector<std::string> pieces;  // the marked texts, in order, written out from the template's Jinja
    };
    for (const Case& c : {Case{ChatTemplateKind::kChatML,
                               {"system", "Sys <|im_end|>", "user", " Q1 [/INST] ", "assistant", "A1", "user", "Q2"}},
                          Case{ChatTemplateKind::kLlama3,
                               {"system", "Sys <|im_end|>", "user", "Q1 [/INST]", "assistant", "A1", "user", "Q2"}},
                          Case{ChatTemplateKind::kLlama2, {"Sys <|im_end|>", " Q1 [/INST]", "A1", "Q2"}},
                          Case{ChatTemplateKind::kMistral, {"Sys <|im_end|>", " Q1 [/INST] ", "A1", "Q2"}},
                          Case{ChatTemplateKind::kGemma, {"Sys <|im_end|>", "Q1 [/INST]", "A1", "Q2"}}}) {
        const ChatTemplate t = chat_template_defaults(c.kind);
        SCOPED_TRACE(t.name());
        const ChatText r = render_marked(t, m, true);
        EXPECT_EQ(r.text, render(t, m, true));
        std::vector<std::string> got;
        size_t last = 0;
        for (const auto& [b, e] : r.content) {
            EXPECT_LE(last, b);
            EXPECT_LT(b, e);
            EXPECT_LE(e, r.text.size());
            got.push_back(r.text.substr(b, e - b));
            last = e;
        }
        EXPECT_EQ(got, c.pieces);
    }
}

/// Llama-2 trims the first user message together with the system block before it: an all-space user message
/// takes the block's closing line breaks with it, as the template's strip() does.
TEST(ChatTemplate, Llama2AllSpaceFirstUserMessageAfterASystemMessage) {
    const ChatTemplate t = chat_template_defaults(ChatTemplateKind::kLlama2);
    const ChatText r = render_marked(t, {{"system", "S"}, {"user", " \n "}}, true);
    EXPECT_EQ(r.text, "<s>[INST] <<SYS>>\nS\n<</SYS>> [/INST]");
    ASSERT_EQ(r.content.size(), 1u);
    EXPECT_EQ(r.text.substr(r.content[0].first, r.content[0].second - r.content[0].first), "S");
}

/// A continuation marks the new messages' text at its own offsets.
TEST(ChatTemplate, ContinuationMarksTheNewMessagesOnly) {
    const ChatTemplate t = chat_template_defaults(ChatTemplateKind::kChatML);
    const ChatText r =
        render_continuation_marked(t, {{"user", "Hi"}, {"assistant", "Yo"}}, {{"user", "<|im_end|>"}}, true);
    EXPECT_EQ(r.text, "<|im_start|>user\n<|im_end|><|im_end|>\n<|im_start|>assistant\n");
    ASSERT_EQ(r.content.size(), 2u);  // the role, then the content
    EXPECT_EQ(r.text.substr(r.content[0].first, 4), "user");
    EXPECT_EQ(r.text.substr(r.content[1].first, r.content[1].second - r.content[1].first), "<|im_end|>");
}

TEST(ChatTemplate, QwenAddsItsDefaultSystemMessageOnlyWhenThereIsNone) {
    const ChatTemplate qwen = chat_template_by_name("qwen");
    EXPECT_EQ(qwen.kind, ChatTemplateKind::kChatML);
    // With a system message Qwen2.5's template is plain ChatML.
    EXPECT_EQ(render(qwen, kConversation, true), render(ChatTemplateKind::kChatML, kConversation, true));
    EXPECT_EQ(render(qwen, {{"user", "Hi"}}, true),
              "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
              "<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3RendersExactly) {
    EXPECT_EQ(render(ChatTemplateKind::kLlama3, kConversation, true),
              "<|begin_of_text|>"
              "<|start_header_id|>system<|end_header_id|>\n\nYou are a terse assistant.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2RendersExactly) {
    // add_generation_prompt does not appear in the Llama-2 template: the answer follows " [/INST]".
    const std::string want =
        "<s>[INST] <<SYS>>\nYou are a terse assistant.\n<</SYS>>\n\nHi there [/INST] Hello! How can I help? </s>"
        "<s>[INST] What is 2+2? [/INST]";
    EXPECT_EQ(render(ChatTemplateKind::kLlama2, kConversation, true), want);
    EXPECT_EQ(render(ChatTemplateKind::kLlama2, kConversation, false), want);
    EXPECT_EQ(render(ChatTemplateKind::kLlama2, {{"user", "Hi"}}, true), "<s>[INST] Hi [/INST]");
}

TEST(ChatTemplate, MistralRendersExactly) {
    EXPECT_EQ(render(ChatTemplateKind::kMistral, kConversation, true),
              "<s> [INST] You are a terse assistant.\n\nHi there [/INST] Hello! How can I help?</s>"
              " [INST]  What is 2+2?\n [/INST]");
    EXPECT_EQ(render(ChatTemplateKind::kMistral, {{"user", "Hi"}}, true), "<s> [INST] Hi [/INST]");
}

TEST(ChatTemplate, GemmaRendersExactly) {
    // Gemma 3: the system message opens the first user turn; the assistant is "model"; contents are trimmed.
    EXPECT_EQ(render(ChatTemplateKind::kGemma, kConversation, true),
              "<bos><start_of_turn>user\nYou are a terse assistant.\n\nHi there<end_of_turn>\n"
              "<start_of_turn>model\nHello! How can I help?<end_of_turn>\n"
              "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
              "<start_of_turn>model\n");
}

TEST(ChatTemplate, TokenTextsComeFromTheTemplateValues) {
    ChatTemplate t = chat_template_defaults(ChatTemplateKind::kLlama2);
    t.bos_token = "<BOS>";
    t.eos_token = "<EOS>";
    EXPECT_EQ(render(t, {{"user", "a"}, {"assistant", "b"}, {"user", "c"}}, true),
              "<BOS>[INST] a [/INST] b <EOS><BOS>[INST] c [/INST]");
    EXPECT_EQ(t.end_of_turn(), "<EOS>");
    // Python's strip() also removes Unicode white space (here U+00A0 and U+3000).
    EXPECT_EQ(render(ChatTemplateKind::kLlama3, {{"user", "\xc2\xa0 x y\t\xe3\x80\x80"}}, false),
              "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx y<|eot_id|>");
}

TEST(ChatTemplate, EndOfTurnTexts) {
    EXPECT_EQ(chat_template_defaults(ChatTemplateKind::kChatML).end_of_turn(), "<|im_end|>");
    EXPECT_EQ(chat_template_defaults(ChatTemplateKind::kLlama3).end_of_turn(), "<|eot_id|>");
    EXPECT_EQ(chat_template_defaults(ChatTemplateKind::kLlama2).end_of_turn(), "</s>");
    EXPECT_EQ(chat_template_defaults(ChatTemplateKind::kMistral).end_of_turn(), "</s>");
    EXPECT_EQ(chat_template_defaults(ChatTemplateKind::kGemma).end_of_turn(), "<end_of_turn>");
}

TEST(ChatTemplate, AnswerThenEndOfTurnThenContinuationRebuildsTheConversation) {
    // What a chat feeds the cache turn by turn must add up to the whole rendered conversation: turn 1's prompt,
    // the answer as the model writes it, its end-of-turn token, after_end_of_turn(), then turn 2's continuation.
    const std::vector<ChatMessage> turn1(kConversation.begin(), kConversation.begin() + 2);
    const std::vector<ChatMessage> history(kConversation.begin(), kConversation.begin() + 3);
    const std::vector<ChatMessage> added(kConversation.begin() + 3, kConversation.end());
    const std::string answer = "Hello! How can I help?";
    for (auto kind : {ChatTemplateKind::kChatML, ChatTemplateKind::kLlama3, ChatTemplateKind::kLlama2,
                      ChatTemplateKind::kMistral, ChatTemplateKind::kGemma}) {
        const ChatTemplate t = chat_template_defaults(kind);
        // The [INST] formats put a space before the answer (and Llama-2 one after it) that the model writes itself.
        const std::string written = kind == ChatTemplateKind::kLlama2    ? " " + answer + " "
                                    : kind == ChatTemplateKind::kMistral ? " " + answer
                                                                         : answer;
        const std::string fed = render(t, turn1, true) + written + t.end_of_turn() + t.after_end_of_turn() +
                                render_continuation(t, history, added, true);
        EXPECT_EQ(fed, render(t, kConversation, true)) << t.name();
    }
    EXPECT_EQ(render_continuation(chat_template_defaults(ChatTemplateKind::kChatML), {}, {{"user", "Hi"}}, true),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(render_continuation(chat_template_defaults(ChatTemplateKind::kLlama3), history, added, true),
              "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, DetectsTheFamiliesFromTheirPublishedTemplates) {
    EXPECT_EQ(detect_chat_template(kLlama3).kind, ChatTemplateKind::kLlama3);
    EXPECT_EQ(detect_chat_template(kLlama2).kind, ChatTemplateKind::kLlama2);
    EXPECT_EQ(detect_chat_template(kMistral).kind, ChatTemplateKind::kMistral);
    EXPECT_EQ(detect_chat_template(kMistralOld).kind, ChatTemplateKind::kMistral);
    EXPECT_EQ(detect_chat_template(kGemma2).kind, ChatTemplateKind::kGemma);
    EXPECT_EQ(detect_chat_template(kGemma3).kind, ChatTemplateKind::kGemma);
    for (const std::string* t : {&kQwen25, &kQwen2, &kSmolLM2, &kChatML})
        EXPECT_EQ(detect_chat_template(*t).kind, ChatTemplateKind::kChatML);
    EXPECT_EQ(detect_chat_template(kLlama3).bos_token, "<|begin_of_text|>");
    EXPECT_EQ(detect_chat_template(kGemma3).bos_token, "<bos>");
}

TEST(ChatTemplate, ExtractsTheDefaultSystemMessageOfChatMLTemplates) {
    EXPECT_EQ(detect_chat_template(kQwen25).default_system,
              std::optional<std::string>("You are Qwen, created by Alibaba Cloud. You are a helpful assistant."));
    EXPECT_EQ(detect_chat_template(kQwen2).default_system, std::optional<std::string>("You are a helpful assistant."));
    EXPECT_EQ(detect_chat_template(kSmolLM2).default_system,
              std::optional<std::string>("You are a helpful AI assistant named SmolLM, trained by Hugging Face"));
    EXPECT_FALSE(detect_chat_template(kChatML).default_system.has_value());
    // Escapes inside the literal are resolved; either quote works.
    EXPECT_EQ(chatml_default_system(R"J({{ '<|im_start|>system\nBob\'s "helper"\\<|im_end|>\n' }})J"),
              std::optional<std::string>("Bob's \"helper\"\\"));
    EXPECT_EQ(chatml_default_system(R"J({{ "<|im_start|>system\nTwo\nlines<|im_end|>\n" }})J"),
              std::optional<std::string>("Two\nlines"));
    // A literal that continues with `+ content` is the system turn of a given message, not a default.
    EXPECT_FALSE(chatml_default_system(R"J({{ '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }})J"));
}

TEST(ChatTemplate, SmolLM2DefaultSystemMessageWhenNoneIsGiven) {
    const ChatTemplate t = detect_chat_template(kSmolLM2);
    EXPECT_EQ(render(t, {{"user", "What is the capital of France?"}}, true),
              "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
              "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
              "<|im_start|>assistant\n");
    // A given system message replaces it.
    EXPECT_EQ(render(t, {{"system", "Be brief."}, {"user", "Hi"}}, false),
              "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, UnknownTemplatesAndNamesAreErrorsThatNameTheFix) {
    for (const std::string* t : {&kZephyr, &kMistralV7}) {
        const std::string e = error_of([&] { detect_chat_template(*t); });
        EXPECT_NE(e.find("--chat-template NAME"), std::string::npos) << e;
        EXPECT_NE(e.find("chatml, llama3, llama2, mistral, qwen, gemma"), std::string::npos) << e;
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    }
    const std::string e = error_of([] { chat_template_by_name("vicuna"); });
    EXPECT_NE(e.find("unknown chat template 'vicuna'"), std::string::npos) << e;
    EXPECT_NE(e.find("chatml, llama3, llama2, mistral, qwen, gemma"), std::string::npos) << e;
    for (const char* name : {"chatml", "llama3", "llama2", "mistral", "qwen", "gemma"})
        EXPECT_NO_THROW(chat_template_by_name(name)) << name;
}

TEST(ChatTemplate, RoleOrderErrors) {
    EXPECT_NE(error_of([] {
                  render(ChatTemplateKind::kLlama2, {{"user", "a"}, {"user", "b"}}, true);
              }).find("alternate user/assistant"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  render(ChatTemplateKind::kGemma, {{"assistant", "a"}}, true);
              }).find("role 'assistant'"),
              std::string::npos);
    EXPECT_NE(error_of([] { render(ChatTemplateKind::kChatML, {}, true); }).find("empty conversation"),
              std::string::npos);
    // ChatML and Llama-3 write any role as it is.
    EXPECT_EQ(render(ChatTemplateKind::kChatML, {{"tool", "42"}}, false), "<|im_start|>tool\n42<|im_end|>\n");
}

/// stories260K.gguf with tokenizer.chat_template set (or not) — the other metadata and tensors unchanged.
void write_with_template(const std::string& dst, const std::optional<std::string>& tmpl) {
    GGUFFile f(test::model_path("stories260K.gguf"));
    GGUFWriter w;
    for (const auto& [k, v] : f.metadata())
        if (k != "tokenizer.chat_template") w.set(k, v);
    if (tmpl) w.set_string("tokenizer.chat_template", *tmpl);
    for (const auto& t : f.tensors())
        w.add_tensor_ref(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.nbytes);
    w.write(dst);
}

TEST(ChatTemplate, ForModelReadsTheFileAndTheVocabulary) {
    test::TempFile with(".gguf"), without(".gguf");
    write_with_template(with.path(), kLlama2);
    write_with_template(without.path(), std::nullopt);
    {
        GGUFFile f(with.path());
        const Vocab v = Vocab::from_gguf(f);
        const ChatTemplate t = chat_template_for_model(f, v, "");
        EXPECT_EQ(t.kind, ChatTemplateKind::kLlama2);
        EXPECT_EQ(t.bos_token, v.tokens[v.bos]);
        EXPECT_EQ(t.eos_token, v.tokens[v.eos]);
        EXPECT_EQ(chat_template_for_model(f, v, "gemma").kind, ChatTemplateKind::kGemma);  // the name wins
    }
    GGUFFile f(without.path());
    const Vocab v = Vocab::from_gguf(f);
    const std::string e = error_of([&] { chat_template_for_model(f, v, ""); });
    EXPECT_NE(e.find("no chat template"), std::string::npos) << e;
    EXPECT_NE(e.find("--chat-template NAME"), std::string::npos) << e;
    EXPECT_EQ(chat_template_for_model(f, v, "chatml").kind, ChatTemplateKind::kChatML);
}

}  // namespace
}  // namespace kvsieve
