// RULER prompt formats (eval/ruler_prompt.h): the raw text, and kvpress's chat format, whose split of the chat
// template around the context is checked here by hand and, on SmolLM2-135M-Instruct, against the token ids kvpress's
// own pipeline made (tests/data/kvpress/smollm2_ruler_chat_prompt.json, tools/make_kvpress_prompt_fixture.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "eval/ruler.h"
#include "eval/ruler_prompt.h"
#include "eval/tasks.h"
#include "model/llama_model.h"
#include "test_util.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve {
namespace {

const std::string kCorpus =
    "The river ran past the old mill. Children played by the water every summer. The miller's daughter kept a "
    "garden of roses behind the house, and the bees came from the whole valley to visit it.";

TEST(RulerPrompt, EveryTaskHasItsAnswerPrefixAtTheEndOfItsQuestion) {
    const auto tok = Tokenizer::from_gguf(test::stories260k().file());
    for (const auto& task : task_names()) {
        SCOPED_TRACE(task);
        const TaskExample ex = make_task_example(task, 1024, *tok, kCorpus, 3);
        ASSERT_FALSE(ex.answer_prefix.empty());
        ASSERT_GT(ex.question.size(), ex.answer_prefix.size());
        EXPECT_EQ(ex.question_only() + ex.answer_prefix, ex.question);
        if (task.rfind("niah", 0) == 0) {
            EXPECT_EQ(ex.answer_prefix.rfind(" The special magic ", 0), 0u) << ex.answer_prefix;
            EXPECT_EQ(ex.question_only().back(), '?') << ex.question_only();
        } else {
            EXPECT_EQ(ex.answer_prefix.rfind(" Answer:", 0), 0u) << ex.answer_prefix;
            EXPECT_EQ(ex.answer_prefix.find(" Answer:", 1), std::string::npos) << ex.answer_prefix;
        }
    }
}

TEST(RulerPrompt, ChatSplitIsTheTemplateAroundTheContext) {
    ChatTemplate chatml = chat_template_defaults(ChatTemplateKind::kChatML);
    chatml.default_system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
    const ChatContextSplit s = split_chat_context(chatml, "Some text.\n#### with hashes ####");
    EXPECT_EQ(s.context,
              "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
              "<|im_start|>user\nSome text.\n#### with hashes ####");
    EXPECT_EQ(s.suffix, "<|im_end|>\n<|im_start|>assistant\n");
    // Llama 3 trims the content: the context's leading white space goes, the separator keeps its end.
    const ChatContextSplit l = split_chat_context(chat_template_defaults(ChatTemplateKind::kLlama3), "  Text.");
    EXPECT_EQ(l.context, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nText.");
    EXPECT_EQ(l.suffix, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(RulerPrompt, FormatNamesAndBadNames) {
    EXPECT_EQ(parse_ruler_format("chat"), RulerFormat::kChat);
    EXPECT_EQ(parse_ruler_format("raw"), RulerFormat::kRaw);
    EXPECT_EQ(ruler_format_name(RulerFormat::kChat), "chat");
    EXPECT_EQ(ruler_format_name(RulerFormat::kRaw), "raw");
    try {
        parse_ruler_format("Chat");
        ADD_FAILURE() << "'Chat' was taken";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'Chat' is not chat or raw"), std::string::npos) << e.what();
    }
}

TEST(RulerPrompt, RawIsTheTextAndChatWrapsTheContextAndQuestion) {
    const auto tok = Tokenizer::from_gguf(test::stories260k().file());
    const TaskExample ex = make_task_example("niah_single_1", 300, *tok, "", 0);
    const ChatTemplate chatml = chat_template_defaults(ChatTemplateKind::kChatML);
    const RulerPromptIds raw = ruler_prompt_ids(*tok, ex, RulerFormat::kRaw, chatml);
    EXPECT_EQ(raw.context, tok->encode(ex.context(), true, false));
    EXPECT_EQ(raw.question, tok->encode(ex.question, false, false));
    const RulerPromptIds chat = ruler_prompt_ids(*tok, ex, RulerFormat::kChat, chatml);
    EXPECT_EQ(chat.context, tok->encode("<|im_start|>user\n" + ex.context(), false, true));
    EXPECT_EQ(chat.question,
              tok->encode(ex.question_only() + "<|im_end|>\n<|im_start|>assistant\n" + ex.answer_prefix, false, true));
}

TEST(RulerPrompt, ARunRecordsItsFormatAndExportsItsPromptIds) {
    const LlamaModel& m = test::stories260k();
    const auto tok = Tokenizer::from_gguf(m.file());
    RulerOptions o;
    o.lengths = {300};
    o.samples = 2;
    o.progress = false;
    o.format = RulerFormat::kChat;
    o.chat_template = chat_template_defaults(ChatTemplateKind::kChatML);
    const auto dir = std::filesystem::temp_directory_path() / ("kvsieve_ruler_format_" + std::to_string(::getpid()));
    const RulerResult r = run_ruler(m, *tok, "", "full", o);
    EXPECT_EQ(r.metrics()["format"], "chat");
    write_ruler_cell(dir.string(), r, o, "stories260K.gguf", "");
    const std::string yaml = read_whole_file((dir / "config.yaml").string(), "config");
    EXPECT_NE(yaml.find("\nformat: chat\n"), std::string::npos) << yaml;
    const auto metrics = nlohmann::json::parse(read_whole_file((dir / "metrics.json").string(), "metrics"));
    EXPECT_EQ(metrics["format"], "chat");
    EXPECT_EQ(ruler_cell_settings("full", o, "m", "c")["format"], "chat");
    // The export: one line per example, in run order, with the text fields and the ids of the run's format.
    const std::string path = (dir / "examples.jsonl").string();
    export_ruler_examples(path, m, *tok, "", o);
    std::ifstream in(path);
    std::string line;
    for (int64_t i = 0; i < 2; ++i) {
        ASSERT_TRUE(std::getline(in, line));
        const auto j = nlohmann::json::parse(line);
        const TaskExample ex = make_task_example("niah_single_1", 300, *tok, "", static_cast<uint64_t>(i));
        EXPECT_EQ(j["index"], i);
        EXPECT_EQ(j["seed"], i);
        EXPECT_EQ(j["context"], ex.context());
        EXPECT_EQ(j["question"], ex.question_only());
        EXPECT_EQ(j["answer_prefix"], ex.answer_prefix);
        EXPECT_EQ(j["format"], "chat");
        const RulerPromptIds ids = ruler_prompt_ids(*tok, ex, RulerFormat::kChat, o.chat_template);
        EXPECT_EQ(j["context_ids"].get<std::vector<int32_t>>(), ids.context);
        EXPECT_EQ(j["question_ids"].get<std::vector<int32_t>>(), ids.question);
    }
    EXPECT_FALSE(std::getline(in, line));
    std::filesystem::remove_all(dir);
}

// On the real model: kvpress's pipeline preprocessing of one kvsieve example, made by Hugging Face's tokenizer.
TEST(SmolLM2, RulerChatPromptIdsMatchKvpress) {
    const std::string path = std::string(KVSIEVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run `bash scripts/get-model.sh`";
    const auto fixture = nlohmann::json::parse(
        read_whole_file(test::data_dir() + "/kvpress/smollm2_ruler_chat_prompt.json", "kvpress prompt fixture"));
    const LlamaModel m(path);
    const auto tok = Tokenizer::from_gguf(m.file());
    const ChatTemplate t = chat_template_for_model(m.file(), tok->vocab(), "");
    TaskExample ex;
    ex.answer_prefix = fixture["answer_prefix"].get<std::string>();
    ex.question = fixture["question"].get<std::string>() + ex.answer_prefix;
    ex.input = fixture["context"].get<std::string>() + ex.question;
    const RulerPromptIds ids = ruler_prompt_ids(*tok, ex, RulerFormat::kChat, t);
    const auto want_context = fixture["context_ids"].get<std::vector<int32_t>>();
    const auto want_question = fixture["question_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids.context, want_context);
    EXPECT_EQ(ids.question, want_question);
    // The template's tokens are special ids, as Hugging Face's tokenizer parses them: <|im_start|> opens the context.
    ASSERT_FALSE(ids.context.empty());
    EXPECT_EQ(ids.context[0], tok->vocab().find("<|im_start|>"));
    // The fixture's example is still the one kvsieve generates (else regenerate it with the tool).
    const TaskExample now = make_task_example(fixture["task"].get<std::string>(), fixture["length"].get<int64_t>(),
                                              *tok, "", fixture["seed"].get<uint64_t>());
    EXPECT_EQ(now.context(), fixture["context"].get<std::string>());
    EXPECT_EQ(now.question_only(), fixture["question"].get<std::string>());
    EXPECT_EQ(now.answer_prefix, ex.answer_prefix);
}

}  // namespace
}  // namespace kvsieve
