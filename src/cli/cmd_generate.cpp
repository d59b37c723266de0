// kvsieve generate: prefill the prompt in one batch, then decode token by token, streaming text. With --chat the
// prompt is one user message rendered with the model's chat template, and only the answer is printed.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "cli/cache_options.h"
#include "predict/bundled_predictors.h"
#include "cli/chat_session.h"
#include "cli/commands.h"
#include "cli/sampler_options.h"
#include "kernels/parallel.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "session/cache_file.h"
#include "session/decode_driver.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve::cli {

namespace {
struct GenerateOpts {
    std::string model, prompt, file;
    int n_predict = 128;
    int64_t n_ctx = 0;
    int threads = 0;
    SamplerParams sp;
    bool ids = false;
    bool no_bos = false;
    bool quiet = false;
    bool chat = false;
    std::string system, chat_template;
    bool has_system = false;
    std::string save_cache, load_cache;
    CacheOptions cache;
};

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void print_timings(int64_t n_prompt, size_t n_out, double prefill_s, double decode_s) {
    const double n_dec = n_out > 1 ? static_cast<double>(n_out - 1) : 0;
    std::fprintf(stderr, "prefill: %ld tokens in %.1f ms (%.1f t/s); decode: %zu tokens in %.1f ms (%.1f t/s)\n",
                 static_cast<long>(n_prompt), 1e3 * prefill_s, n_prompt / prefill_s, n_out, 1e3 * decode_s,
                 n_dec > 0 ? n_dec / decode_s : 0.0);
}

void print_ids(const std::vector<int32_t>& ids) {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
}

/// --chat: one user turn through the chat template; prints the answer only.
void run_chat(const GenerateOpts& o, const LlamaModel& model, const Tokenizer& tok, int64_t n_ctx) {
    const ChatTemplate tmpl = chat_template_for_model(model.file(), tok.vocab(), o.chat_template);
    if (!o.quiet)
        std::fprintf(stderr, "model: %s\nchat template: %s\n", model.config().summary().c_str(), tmpl.name().c_str());
    std::unique_ptr<KVCache> cache = o.cache.make_cache(model, n_ctx);
    Sampler sampler(o.sp);
    ChatSession chat(model, tok, tmpl, *cache, o.cache, sampler,
                     o.has_system ? std::optional<std::string>(o.system) : std::nullopt, false);
    const ChatTurn r = chat.turn(o.prompt, o.n_predict, [&](const std::string& s) {
        if (o.ids) return;
        std::fputs(s.c_str(), stdout);
        std::fflush(stdout);
    });
    require(!(r.context_full && r.ids.empty()), "the chat prompt has ", r.n_prompt,
            " tokens, which leaves no room to answer in the context of ", n_ctx, " (-c)");
    if (o.ids) {
        print_ids(r.ids);
    } else {
        std::fputs("\n", stdout);
    }
    std::fflush(stdout);
    if (!o.quiet) {
        if (r.context_full)
            std::fprintf(stderr, "context full: the answer was cut off at %ld tokens (-c)\n", static_cast<long>(n_ctx));
        print_timings(r.n_prompt, r.ids.size(), r.prefill_s, r.decode_s);
        std::fputs(cache->stats().table().c_str(), stderr);
    }
    o.cache.write_stats(cache->stats());
}

/// The text of --file (a document), then a blank line and -p's text when both are given.
std::string read_prompt_file(const std::string& path, const std::string& prompt) {
    std::ifstream in(path, std::ios::binary);
    require(static_cast<bool>(in), "cannot read --file ", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    require(!text.empty() || !prompt.empty(), "--file ", path, " is empty and no -p was given");
    return prompt.empty() ? text : text + "\n\n" + prompt;
}

/// --load-cache: the saved sequence (its policy, context and history) is where this run starts; its policy and
/// context become the run's (a different --policy is an error). None without --load-cache.
std::optional<SavedSequence> load_saved(GenerateOpts& o, const LlamaModel& model) {
    if (o.load_cache.empty()) return std::nullopt;
    SavedSequence saved = read_sequence(o.load_cache, model);
    require(o.cache.policy == "full" || o.cache.policy == saved.policy_spec, "--load-cache ", o.load_cache,
            " was saved under policy '", saved.policy_spec, "'; drop --policy or give the same one");
    o.cache.policy = saved.policy_spec;
    if (o.n_ctx == 0) o.n_ctx = saved.n_ctx;
    return saved;
}

/// The options' combinations, checked before the model loads; reads --file into the prompt.
void check_options(GenerateOpts& o) {
    require(!o.prompt.empty() || !o.file.empty() || !o.load_cache.empty(),
            "give a prompt with -p, a document with -f, or both (or --load-cache to continue a saved sequence)");
    require(o.load_cache.empty() || !o.chat, "--load-cache does not apply to --chat");
    require(o.save_cache.empty() || !o.chat, "--save-cache does not apply to --chat");
    if (!o.file.empty()) o.prompt = read_prompt_file(o.file, o.prompt);
    o.sp.validate();
    require(o.n_predict >= 0, "-n must be ≥ 0, got ", o.n_predict);
    require(o.n_ctx >= 0, "-c must be ≥ 0, got ", o.n_ctx);
    require(o.chat || (!o.has_system && o.chat_template.empty()), "--system and --chat-template apply to --chat");
    require(!(o.chat && o.no_bos), "--no-bos does not apply to --chat (the chat template decides the BOS)");
}

void run(GenerateOpts o) {
    check_options(o);
    set_num_threads(o.threads);
    LlamaModel model(o.model);
    select_predictor_model(model.file());  // a learned preset without model= takes its predictor
    const auto tok = Tokenizer::from_gguf(model.file());
    const ModelConfig& c = model.config();
    if (o.chat) return run_chat(o, model, *tok, o.n_ctx > 0 ? o.n_ctx : std::min<int64_t>(c.n_ctx_train, 4096));

    const std::optional<SavedSequence> saved = load_saved(o, model);
    const int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min<int64_t>(c.n_ctx_train, 4096);
    std::unique_ptr<KVCache> cache = o.cache.make_cache(model, n_ctx);
    Session session(model, *tok, *cache);
    Sampler sampler(o.sp);
    std::vector<float> logits;
    if (saved) {
        restore_sequence(session, *saved);
        GenerationState g = decode_generation_state(saved->extra, c.n_vocab);
        logits = std::move(g.logits);
        sampler.set_state(g.sampler_state);
    }
    // A continued sequence takes the new text without BOS, after what it holds.
    std::vector<int32_t> prompt;
    if (!o.prompt.empty()) prompt = tok->encode(o.prompt, !o.no_bos && !saved, true);
    require(saved || !prompt.empty(), "the prompt is empty (and the model adds no BOS token)");
    require(!saved || !prompt.empty() || static_cast<int64_t>(logits.size()) == c.n_vocab, "--load-cache ",
            o.load_cache,
            " ended its generation (end of text or a full context); give a new prompt with -p to continue it");
    const int64_t held = session.n_tokens();
    require(held + static_cast<int64_t>(prompt.size()) <= n_ctx, "the prompt has ", prompt.size(), " tokens",
            held ? " after the " + std::to_string(held) + " the saved sequence holds" : std::string(),
            ", longer than the context of ", n_ctx, " (-c)");
    const int64_t n_gen = std::min<int64_t>(o.n_predict, n_ctx - held - static_cast<int64_t>(prompt.size()));
    if (!o.quiet) std::fprintf(stderr, "model: %s\n", c.summary().c_str());
    if (saved && !o.quiet)
        std::fprintf(stderr, "continuing %s: %ld tokens, policy %s\n", o.load_cache.c_str(), static_cast<long>(held),
                     saved->policy_spec.c_str());

    if (!o.ids) {
        std::fputs(o.prompt.c_str(), stdout);
        std::fflush(stdout);
    }
    const double t0 = now_s();
    if (!prompt.empty()) o.cache.prefill(session, prompt, logits);
    const double t1 = now_s();
    // The last token is run too when the sequence is saved, so that a continuation samples right away.
    StopRules rules;
    rules.max_tokens = n_gen;
    DecodeDriver driver(*tok, sampler, rules);
    const DecodeRun run =
        decode_session(session, driver, logits, o.save_cache.empty() ? RunLast::kNo : RunLast::kUnlessEndToken,
                       [&](const DecodeStep& st) {
                           if (o.ids || st.text.empty()) return;
                           std::fputs(st.text.c_str(), stdout);
                           std::fflush(stdout);
                       });
    const std::vector<int32_t>& out = driver.tokens();
    if (!o.save_cache.empty()) {
        // Nothing to continue from without new text: an ended answer, or no prompt and nothing sampled.
        if (!run.logits_current || (out.empty() && prompt.empty())) logits.clear();
        save_sequence(o.save_cache, model, session, encode_generation_state({logits, sampler.state()}));
    }
    const double t2 = now_s();
    if (o.ids) {
        print_ids(out);
    } else {
        std::printf("\n");
    }
    std::fflush(stdout);
    if (!o.quiet) {
        print_timings(static_cast<int64_t>(prompt.size()), out.size(), t1 - t0, t2 - t1);
        if (!o.save_cache.empty())
            std::fprintf(stderr, "saved the sequence (%ld tokens) to %s\n", static_cast<long>(session.n_tokens()),
                         o.save_cache.c_str());
        std::fputs(cache->stats().table().c_str(), stderr);
    }
    o.cache.write_stats(cache->stats());
}
}  // namespace

void add_generate(CLI::App& app) {
    auto* cmd = app.add_subcommand("generate", "generate text from a prompt");
    auto o = std::make_shared<GenerateOpts>();
    cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
    cmd->add_option("-p,--prompt", o->prompt, "prompt text (with --chat: the user's message)");
    cmd->add_option("-f,--file", o->file,
                    "read a document from this file; the prompt is its text, then a blank line and -p's text "
                    "(e.g. a question about it)")
        ->check(CLI::ExistingFile);
    cmd->add_option("-n,--n-predict", o->n_predict, "tokens to generate")->capture_default_str();
    cmd->add_option("-c,--ctx-size", o->n_ctx, "context size in tokens (0: the model's, at most 4096)")
        ->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "threads (0: all cores)")->capture_default_str();
    add_sampler_options(cmd, o->sp);
    cmd->add_flag("--ids", o->ids, "print the generated token ids (one line) instead of text");
    cmd->add_flag("--no-bos", o->no_bos, "do not add BOS to the prompt");
    cmd->add_flag("-q,--quiet", o->quiet, "no model summary or timings on stderr");
    cmd->add_flag("--chat", o->chat,
                  "render the prompt as a user message with the chat template; print only the answer");
    cmd->add_option("--system", o->system, "with --chat: a system message before the user's");
    cmd->add_option("--chat-template", o->chat_template,
                    "with --chat: chat format instead of the model's template: " + chat_template_names());
    cmd->add_option("--save-cache", o->save_cache,
                    "after generating, save the sequence (its compressed KV cache, history, policy state and the "
                    "next token's logits) to this file");
    cmd->add_option("--load-cache", o->load_cache,
                    "continue a sequence saved with --save-cache (same model and policy): -p adds text after it, "
                    "without -p generation goes on where it stopped")
        ->check(CLI::ExistingFile);
    o->cache.add_to(cmd);
    cmd->callback([o, cmd] {
        o->has_system = cmd->count("--system") > 0;
        run(*o);
    });
}

}  // namespace kvsieve::cli
