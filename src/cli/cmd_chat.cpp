// kvsieve chat: an interactive conversation read line by line from stdin. The KV cache and its policy carry over
// from turn to turn: each turn prefills only its own tokens. Commands: /stats (the cache table), /reset (a new
// conversation), /quit (or end of input).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <unistd.h>

#include "cli/cache_options.h"
#include "predict/bundled_predictors.h"
#include "cli/chat_session.h"
#include "cli/commands.h"
#include "cli/sampler_options.h"
#include "kernels/parallel.h"
#include "util/error.h"

namespace kvsieve::cli {

namespace {
struct ChatOpts {
    std::string model, system, chat_template;
    bool has_system = false;
    int64_t n_predict = 512;
    int64_t n_ctx = 0;
    int threads = 0;
    SamplerParams sp;
    bool quiet = false;
    CacheOptions cache;
};

void run(const ChatOpts& o) {
    o.sp.validate();
    require(o.n_predict >= 0, "-n must be ≥ 0, got ", o.n_predict);
    require(o.n_ctx >= 0, "-c must be ≥ 0, got ", o.n_ctx);
    set_num_threads(o.threads);
    LlamaModel model(o.model);
    select_predictor_model(model.file());  // a learned preset without model= takes its predictor
    const auto tok = Tokenizer::from_gguf(model.file());
    const ChatTemplate tmpl = chat_template_for_model(model.file(), tok->vocab(), o.chat_template);
    const ModelConfig& c = model.config();
    const int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min<int64_t>(c.n_ctx_train, 4096);
    std::unique_ptr<KVCache> cache = o.cache.make_cache(model, n_ctx);
    Sampler sampler(o.sp);
    ChatSession chat(model, *tok, tmpl, *cache, o.cache, sampler,
                     o.has_system ? std::optional<std::string>(o.system) : std::nullopt, true);
    const bool interactive = isatty(0);
    if (!o.quiet) {
        std::fprintf(stderr, "model: %s\n", c.summary().c_str());
        std::fprintf(stderr, "chat template: %s%s%s; context %ld tokens; commands: /stats /reset /quit\n",
                     tmpl.name().c_str(), tmpl.default_system ? ", default system message: " : "",
                     tmpl.default_system ? tmpl.default_system->c_str() : "", static_cast<long>(n_ctx));
    }
    std::string line;
    while (true) {
        if (interactive) {
            std::fputs("> ", stderr);
            std::fflush(stderr);
        }
        if (!std::getline(std::cin, line)) {
            if (interactive) std::fputs("\n", stderr);  // end the prompt line after Ctrl-D
            break;
        }
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        if (line == "/quit" || line == "/exit") break;
        if (line == "/stats") {
            std::fputs(cache->stats().table().c_str(), stdout);
            std::fflush(stdout);
            continue;
        }
        if (line == "/reset") {
            chat.reset();
            std::fputs("(new conversation)\n", stderr);
            continue;
        }
        if (line[0] == '/') {
            std::fprintf(stderr, "unknown command '%s' (commands: /stats /reset /quit)\n", line.c_str());
            continue;
        }
        const ChatTurn r = chat.turn(line, o.n_predict, [](const std::string& s) {
            std::fputs(s.c_str(), stdout);
            std::fflush(stdout);
        });
        if (r.context_full && r.ids.empty()) {
            std::fprintf(stderr,
                         "context full: the conversation holds %ld tokens and this turn needs %ld more of the %ld "
                         "(-c); nothing was generated. /reset starts a new conversation\n",
                         static_cast<long>(cache->n_tokens()), static_cast<long>(r.n_prompt), static_cast<long>(n_ctx));
            continue;
        }
        std::fputs("\n", stdout);
        std::fflush(stdout);
        if (r.context_full)
            std::fprintf(stderr,
                         "context full: all %ld positions (-c) are used; the answer was cut off. /reset starts "
                         "a new conversation\n",
                         static_cast<long>(n_ctx));
        if (!o.quiet) {
            const double n_dec = r.ids.size() > 1 ? static_cast<double>(r.ids.size() - 1) : 0;
            std::fprintf(stderr, "[prefill %ld tokens in %.1f ms, %zu generated (%.1f t/s), cache %ld tokens]\n",
                         static_cast<long>(r.n_prompt), 1e3 * r.prefill_s, r.ids.size(),
                         n_dec > 0 && r.decode_s > 0 ? n_dec / r.decode_s : 0.0, static_cast<long>(cache->n_tokens()));
        }
    }
    o.cache.write_stats(cache->stats());
}
}  // namespace

void add_chat(CLI::App& app) {
    auto* cmd = app.add_subcommand("chat",
                                   "chat with an instruction-tuned model, one message per line of stdin "
                                   "(/stats, /reset, /quit)");
    auto o = std::make_shared<ChatOpts>();
    cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
    cmd->add_option("--system", o->system, "system message at the start of the conversation");
    cmd->add_option("--chat-template", o->chat_template,
                    "chat format instead of the model's template: " + chat_template_names());
    cmd->add_option("-n,--n-predict", o->n_predict, "most tokens per answer")->capture_default_str();
    cmd->add_option("-c,--ctx-size", o->n_ctx, "context size in tokens (0: the model's, at most 4096)")
        ->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "threads (0: all cores)")->capture_default_str();
    add_sampler_options(cmd, o->sp);
    cmd->add_flag("-q,--quiet", o->quiet, "no model summary or per-turn timings on stderr");
    o->cache.add_to(cmd);
    cmd->callback([o, cmd] {
        o->has_system = cmd->count("--system") > 0;
        run(*o);
    });
}

}  // namespace kvsieve::cli
