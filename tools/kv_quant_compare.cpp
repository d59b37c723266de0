// Where KV quantization happens, measured: for each policy, the F16 cache of that policy is the reference; each
// quantized cache (keys/values q8_0/q8_0, q8_0/q4_0, q4_0/q4_0, quantized at write or at admission) reads the same
// chat-format prompt (a document and a question) and is then fed the reference's greedy tokens (teacher forcing).
// Per step it records how far the logits of the reference's 10 most likely tokens move (max and mean |Δ|) and
// whether its most likely token is the reference's; a second, free-running greedy decode from the same prompt gives
// the tokens that agree with the reference's greedy answer before the first difference. Prints one Markdown row per
// (policy, types, place) with the cache's final bytes.
//
// Usage: kvsieve_kv_quant_compare MODEL DOC QUESTION STEPS POLICY [POLICY...]   (one prefill per cache: the
// teacher-forced decode continues a copy of the cache saved after the prompt)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "io/gguf.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "session/session.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/binary_io.h"
#include "util/error.h"
#include "util/file.h"

using namespace kvsieve;

namespace {

struct Run {
    std::vector<std::vector<float>> logits;  // per teacher-forced step [V]
    std::vector<int32_t> greedy;             // free-running greedy tokens
    uint64_t bytes = 0;
    double full_bytes = 0;
};

Run run(const LlamaModel& m, const Tokenizer& tok, const std::vector<int32_t>& prompt, const std::string& spec,
        KVTypes types, const std::vector<int32_t>* forced, int steps) {
    const int64_t n_ctx = static_cast<int64_t>(prompt.size()) + steps + 1;
    auto make = [&] {
        return KVCache(m.config(), n_ctx, parse_policy(spec), std::make_shared<KVPool>(m.config().head_dim, types));
    };
    Run r;
    KVCache cache = make();
    std::vector<float> logits;
    {
        Session s(m, tok, cache);
        s.prefill(prompt, PrefillPlan{}, logits);
    }
    // The cache after the prompt, for the teacher-forced decode (one prefill serves both decodes).
    BinaryWriter saved;
    cache.save(saved);
    const std::vector<float> first = logits;
    for (int i = 0; i < steps; ++i) {
        const auto best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        r.greedy.push_back(best);
        if (!forced) r.logits.push_back(logits);  // forced along its own greedy tokens
        m.forward(StepPhase::kDecode, {best}, cache, logits);
    }
    r.bytes = cache.stats().kv_bytes_final;
    r.full_bytes = static_cast<double>(cache.stats().kv_bytes_full);
    if (forced) {
        KVCache again = make();
        BinaryReader in(saved.data().data(), saved.data().size(), "the saved cache");
        again.load(in);
        logits = first;
        for (int i = 0; i < steps; ++i) {
            r.logits.push_back(logits);
            m.forward(StepPhase::kDecode, {(*forced)[i]}, again, logits);
        }
    }
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        require(argc >= 6, "usage: kvsieve_kv_quant_compare MODEL DOC QUESTION STEPS POLICY [POLICY...]");
        const LlamaModel m(argv[1]);
        const auto tok = Tokenizer::from_gguf(m.file());
        const ChatTemplate tmpl = chat_template_for_model(m.file(), tok->vocab(), "");
        const std::string text =
            render(tmpl, {{"user", read_whole_file(argv[2], "the document") + "\n\n" + std::string(argv[3])}}, true);
        const std::vector<int32_t> prompt = tok->encode(text, false, true);
        const int steps = std::stoi(argv[4]);
        std::fprintf(stderr, "prompt: %zu tokens, %d steps\n", prompt.size(), steps);
        const KVTypes pairs[] = {
            {KVType::kQ8_0, KVType::kQ8_0}, {KVType::kQ8_0, KVType::kQ4_0}, {KVType::kQ4_0, KVType::kQ4_0}};
        std::printf(
            "| policy | K/V | quantized at | top-10 max abs(Δlogit) | top-10 mean abs(Δlogit) | argmax = F16 "
            "(forced) | greedy tokens = F16 | KV MiB | × smaller than full F16 |\n");
        std::printf("|---|---|---|---|---|---|---|---|---|\n");
        for (int a = 5; a < argc; ++a) {
            const std::string spec = argv[a];
            // The F16 cache's greedy answer is the token sequence every cache is forced along: its own forced
            // decode is its free one.
            const Run ref = run(m, *tok, prompt, spec, KVTypes{}, nullptr, steps);
            std::printf("| %s | f16 | — | 0 | 0 | %d/%d | %d/%d | %.2f | %.1f |\n", spec.c_str(), steps, steps, steps,
                        steps, ref.bytes / 1048576.0, ref.full_bytes / static_cast<double>(ref.bytes));
            std::fflush(stdout);
            for (const KVTypes& p : pairs)
                for (KVQuantAt at : {KVQuantAt::kWrite, KVQuantAt::kAdmission}) {
                    KVTypes t = p;
                    t.quant_at = at;
                    const Run q = run(m, *tok, prompt, spec, t, &ref.greedy, steps);
                    double worst = 0, sum = 0;
                    int same = 0, n = 0;
                    for (int i = 0; i < steps; ++i) {
                        const std::vector<float>& lf = ref.logits[i];
                        const std::vector<float>& lq = q.logits[i];
                        std::vector<int32_t> order(lf.size());
                        std::iota(order.begin(), order.end(), 0);
                        std::partial_sort(order.begin(), order.begin() + 10, order.end(), [&](int32_t x, int32_t y) {
                            return lf[x] > lf[y] || (lf[x] == lf[y] && x < y);
                        });
                        for (int j = 0; j < 10; ++j) {
                            const double d = std::fabs(static_cast<double>(lq[order[j]]) - lf[order[j]]);
                            worst = std::max(worst, d);
                            sum += d;
                            ++n;
                        }
                        same += order[0] == static_cast<int32_t>(std::max_element(lq.begin(), lq.end()) - lq.begin());
                    }
                    int prefix = 0;
                    while (prefix < steps && q.greedy[prefix] == ref.greedy[prefix]) ++prefix;
                    std::printf("| %s | %s | %s | %.3f | %.4f | %d/%d | %d/%d | %.2f | %.1f |\n", spec.c_str(),
                                kv_types_spec({t.key, t.value}).c_str(), kv_quant_at_name(at).c_str(), worst, sum / n,
                                same, steps, prefix, steps, q.bytes / 1048576.0,
                                q.full_bytes / static_cast<double>(q.bytes));
                    std::fflush(stdout);
                }
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
