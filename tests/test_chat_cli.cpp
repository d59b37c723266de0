// `kvsieve generate --chat` and `kvsieve chat` end to end on the bundled stories260K model. It has no chat tokens:
// the template's markers tokenize as plain text, so these tests check structure (what is prefilled, what the
// cache holds, errors), not the quality of the answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <sys/wait.h>

#include "test_labels.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "model/llama_model.h"
#include "serve/scheduler.h"
#include "text/tokenizer.h"
#include "cli_runner.h"
#include "test_util.h"

namespace kvsieve {
namespace {

using test::CmdResult;
CmdResult run(const std::string& args, const std::string& input = "") { return test::run_cli(args, input); }

const std::string kModel = test::model_path("stories260K.gguf");
/// What the ChatML template renders for the user message "Once upon a time".
const std::string kTurn1 = "<|im_start|>user\nOnce upon a time<|im_end|>\n<|im_start|>assistant\n";

/// Number of ids `tokenize` prints for text (special tokens parsed).
size_t n_tokens(const std::string& text, bool bos) {
    const CmdResult r =
        run("tokenize -m " + kModel + " --parse-special" + (bos ? "" : " --no-bos") + " -p '" + text + "'");
    EXPECT_EQ(r.status, 0) << r.err;
    std::istringstream is(r.out);
    size_t n = 0;
    std::string id;
    while (is >> id) ++n;
    return n;
}

/// Per turn, from chat's stderr lines "[prefill P tokens in … ms, G generated (…), cache C tokens]".
struct TurnLine {
    long prefill, generated, cache;
};
std::vector<TurnLine> turn_lines(const std::string& err) {
    std::vector<TurnLine> v;
    const std::regex re(
        R"(\[prefill (\d+) tokens in [0-9.]+ ms, (\d+) generated \([0-9.]+ t/s\), cache (\d+) tokens\])");
    for (std::sregex_iterator it(err.begin(), err.end(), re), end; it != end; ++it)
        v.push_back({std::stol((*it)[1]), std::stol((*it)[2]), std::stol((*it)[3])});
    return v;
}

/// Token counts of the cache tables /stats prints ("KV cache — policy P, N tokens, ...").
std::vector<long> table_tokens(const std::string& out) {
    std::vector<long> v;
    const std::regex re(R"(KV cache — policy [^,]+, (\d+) tokens)");
    for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) v.push_back(std::stol((*it)[1]));
    return v;
}

KVSIEVE_SLOW_TEST(ChatCli, GenerateChatWithoutATemplateNamesTheOption) {
    // stories260K has no tokenizer.chat_template.
    CmdResult r = run("generate -m " + kModel + " --chat -p hi -n 4");
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("--chat-template NAME"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    r = run("generate -m " + kModel + " --chat --chat-template vicuna -p hi -n 4");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("unknown chat template 'vicuna'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("chatml, llama3, llama2, mistral, qwen, gemma"), std::string::npos) << r.err;
    r = run("chat -m " + kModel, "hi\n");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("--chat-template NAME"), std::string::npos) << r.err;
    r = run("generate -m " + kModel + " --system x -p hi -n 4");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("apply to --chat"), std::string::npos) << r.err;
}

TEST(ChatCli, GenerateChatFeedsTheRenderedTemplate) {
    // The same ids as plain generate on the text the ChatML template renders (special tokens are parsed in both).
    const std::string chatml =
        "generate -m " + kModel + " --chat --chat-template chatml -p 'Once upon a time' -n 12 --temp 0";
    const CmdResult chat = run(chatml + " --ids -q");
    ASSERT_EQ(chat.status, 0) << chat.err;
    const CmdResult plain = run("generate -m " + kModel + " -p '" + kTurn1 + "' -n 12 --temp 0 --ids -q");
    ASSERT_EQ(plain.status, 0) << plain.err;
    EXPECT_EQ(chat.out, plain.out);
    EXPECT_FALSE(chat.out.empty());
    // Text mode prints only the answer: not the prompt, not the template's markers.
    const CmdResult text = run(chatml + " -q");
    ASSERT_EQ(text.status, 0) << text.err;
    EXPECT_EQ(text.out.find("<|im_start|>"), std::string::npos) << text.out;
    EXPECT_EQ(text.out.find("Once upon a time"), std::string::npos) << text.out;
    EXPECT_EQ(text.out.back(), '\n');
    // One turn of `kvsieve chat` (a conversation: it keeps its answer in the cache) and the server's completion of
    // the same rendered prompt decode through the same driver and give the same answer, token for token: the same
    // text and as many tokens as generate's ids.
    std::istringstream ids(chat.out);
    const size_t n_ids = static_cast<size_t>(
        std::distance(std::istream_iterator<std::string>(ids), std::istream_iterator<std::string>()));
    const CmdResult turn = run("chat -m " + kModel + " --chat-template chatml -n 12 --temp 0", "Once upon a time\n");
    ASSERT_EQ(turn.status, 0) << turn.err;
    EXPECT_EQ(turn.out, text.out);
    const std::vector<TurnLine> lines = turn_lines(turn.err);
    ASSERT_EQ(lines.size(), 1u) << turn.err;
    EXPECT_EQ(lines[0].generated, static_cast<long>(n_ids));
    const LlamaModel& model = test::stories260k();  // kModel
    const auto tok = Tokenizer::from_gguf(model.file());
    SchedulerOptions so;
    so.n_ctx = std::min<int64_t>(model.config().n_ctx_train, 4096);  // generate's context
    Scheduler sched(model, *tok, std::make_shared<KVPool>(model.config().head_dim, KVType::kF16), so);
    GenerationRequest req;
    req.prompt = tok->encode(kTurn1, true, true);  // as generate tokenizes -p
    req.max_tokens = 12;
    req.sampling.temp = 0;
    req.policy_spec = "full";
    req.policy = parse_policy("full");
    const std::shared_ptr<RequestHandle> h = sched.submit(req);
    std::string served;
    GenerationEvent ev;
    for (ev = h->next(); ev.kind == GenerationEvent::Kind::kText; ev = h->next()) served += ev.text;
    ASSERT_EQ(ev.kind, GenerationEvent::Kind::kDone) << ev.error;
    EXPECT_EQ(served + "\n", text.out);
    EXPECT_EQ(ev.usage.completion_tokens, static_cast<int64_t>(n_ids));
}

TEST(ChatCli, GenerateChatDetectsTheTemplateAndItsDefaultSystemMessage) {
    // A copy of stories260K carrying SmolLM2's template: detection must give ChatML with SmolLM2's default
    // system message, i.e. the same tokens as --chat-template chatml with that system message given.
    const std::string smollm2 =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
        "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
    test::TempFile m(".gguf");
    {
        GGUFFile f(kModel);
        GGUFWriter w;
        for (const auto& [k, v] : f.metadata()) w.set(k, v);
        w.set_string("tokenizer.chat_template", smollm2);
        for (const auto& t : f.tensors())
            w.add_tensor_ref(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.nbytes);
        w.write(m.path());
    }
    const std::string tom = " -p 'Tom was sad' -n 10 --temp 0 --ids";
    const CmdResult detected = run("generate -m " + m.path() + " --chat" + tom);
    ASSERT_EQ(detected.status, 0) << detected.err;
    EXPECT_NE(detected.err.find("chat template: chatml"), std::string::npos) << detected.err;
    const CmdResult given = run("generate -m " + kModel +
                                " --chat --chat-template chatml --system 'You are a "
                                "helpful AI assistant named SmolLM, trained by Hugging Face'" +
                                tom + " -q");
    ASSERT_EQ(given.status, 0) << given.err;
    EXPECT_EQ(detected.out, given.out);
    // Prefill counts tell the default system message is there: more tokens than without it.
    const std::regex re(R"(prefill: (\d+) tokens)");
    std::smatch with, without;
    const CmdResult bare = run("generate -m " + kModel + " --chat --chat-template chatml" + tom);
    ASSERT_TRUE(std::regex_search(detected.err, with, re)) << detected.err;
    ASSERT_TRUE(std::regex_search(bare.err, without, re)) << bare.err;
    EXPECT_GT(std::stol(with[1]), std::stol(without[1]) + 10);
}

TEST(ChatCli, ChatCarriesTheCacheAcrossTurns) {
    const int n = 8;
    const CmdResult r = run("chat -m " + kModel + " --chat-template chatml -n " + std::to_string(n) + " --temp 0",
                            "Once upon a time\n/stats\nThe dog ran\n/stats\n/reset\n/stats\nOnce upon a time\n/quit\n"
                            "this line is never read\n");
    ASSERT_EQ(r.status, 0) << r.err;
    const std::vector<TurnLine> turns = turn_lines(r.err);
    const std::vector<long> tables = table_tokens(r.out);
    ASSERT_EQ(turns.size(), 3u) << r.err;
    ASSERT_EQ(tables.size(), 3u) << r.out;
    // Turn 1 prefills the rendered first message (BOS, as the vocabulary asks, then the ChatML text).
    EXPECT_EQ(turns[0].prefill, static_cast<long>(n_tokens(kTurn1, true)));
    // Every generated token (an ending EOS included) is in the cache, and /stats shows that count.
    EXPECT_EQ(turns[0].cache, turns[0].prefill + turns[0].generated);
    EXPECT_EQ(tables[0], turns[0].cache);
    // Turn 2 prefills only its own tokens: the end of turn 1's answer (its <|im_end|> as text when the answer was
    // cut at -n), then the new user message.
    const bool ended = turns[0].generated < n;
    const std::string cont =
        std::string(ended ? "" : "<|im_end|>") + "\n<|im_start|>user\nThe dog ran<|im_end|>\n<|im_start|>assistant\n";
    EXPECT_EQ(turns[1].prefill, static_cast<long>(n_tokens(cont, false)));
    EXPECT_EQ(turns[1].cache, turns[0].cache + turns[1].prefill + turns[1].generated);
    EXPECT_EQ(tables[1], turns[1].cache);
    EXPECT_GT(tables[1], tables[0]);
    // /reset empties the cache; the same first message then gives the same turn (greedy).
    EXPECT_EQ(tables[2], 0);
    EXPECT_EQ(turns[2].prefill, turns[0].prefill);
    EXPECT_EQ(turns[2].cache, turns[0].cache);
    // The answers are on stdout, never the prompt.
    EXPECT_EQ(r.out.find("<|im_start|>"), std::string::npos) << r.out;
}

TEST(ChatCli, ChatKeepsThePolicyAcrossTurns) {
    // A budgeted policy keeps evicting over the whole conversation; KVzip rescoring reads the whole history.
    CmdResult r = run("chat -m " + kModel + " --chat-template chatml -n 24 --temp 0 --policy tova:budget=32 -q",
                      "Once upon a time\nThe dog ran to the park\n/stats\n");
    ASSERT_EQ(r.status, 0) << r.err;
    ASSERT_EQ(table_tokens(r.out).size(), 1u) << r.out;
    EXPECT_GT(table_tokens(r.out)[0], 64);
    const std::regex ratio(R"(compression ratio ([0-9.]+))");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, ratio)) << r.out;
    EXPECT_GT(std::stod(m[1]), 0.3);
    r = run("chat -m " + kModel + " --chat-template chatml -n 8 --temp 0 --policy kvzip:ratio=0.5",
            "Once upon a time\nThe dog ran\n");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(turn_lines(r.err).size(), 2u) << r.err;
}

TEST(ChatCli, ChatSaysWhenTheContextIsFull) {
    const long p1 = static_cast<long>(n_tokens(kTurn1, true));
    // -c leaves room for a few tokens of the answer: it is cut off, then the next turn does not fit at all.
    const CmdResult r = run("chat -m " + kModel + " --chat-template chatml -n 64 --temp 0 -c " + std::to_string(p1 + 3),
                            "Once upon a time\nThe dog ran\n/stats\n");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("the answer was cut off"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("nothing was generated"), std::string::npos) << r.err;
    const std::vector<long> tables = table_tokens(r.out);
    ASSERT_EQ(tables.size(), 1u) << r.out;
    EXPECT_EQ(tables[0], p1 + 3);
}

}  // namespace
}  // namespace kvsieve
