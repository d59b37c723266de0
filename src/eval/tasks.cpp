#include "eval/tasks.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {

namespace {

const char* kWords[] = {
    "apple",   "river",   "candle", "window",  "garden",  "pencil",  "mountain", "ocean",  "thunder", "forest",
    "silver",  "basket",  "castle", "dragon",  "feather", "glacier", "harbor",   "island", "jungle",  "kettle",
    "lantern", "meadow",  "needle", "orchid",  "pepper",  "quartz",  "rocket",   "saddle", "tiger",   "umbrella",
    "valley",  "walnut",  "yellow", "zebra",   "anchor",  "bridge",  "cactus",   "desert", "engine",  "falcon",
    "guitar",  "helmet",  "igloo",  "jacket",  "kitten",  "ladder",  "marble",   "napkin", "otter",   "parrot",
    "quiver",  "raven",   "salmon", "tunnel",  "violin",  "wizard",  "yogurt",   "copper", "velvet",  "cobalt",
    "amber",   "crimson", "ivory",  "jasmine", "lemon",   "mango",   "nutmeg",   "olive",  "plum",    "quince",
    "radish",  "spinach", "tomato", "vanilla", "wheat",   "barley",  "cherry"};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);
const char* kNoise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

struct Rng {
    std::mt19937_64 g;
    explicit Rng(uint64_t s) : g(s) {}
    int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); }
    std::string number() { return std::to_string(uniform(1000000, 9999999)); }
    std::string word() { return kWords[uniform(0, kNumWords - 1)]; }
    std::string key() { return word() + "-" + word(); }
    std::string uuid() {
        static const char* hex = "0123456789abcdef";
        std::string s;
        for (int part : {8, 4, 4, 4, 12}) {
            if (!s.empty()) s += '-';
            for (int i = 0; i < part; ++i) s += hex[uniform(0, 15)];
        }
        return s;
    }
};

uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/// Sentences of the corpus from a seed-dependent offset (cycling), as haystack units.
std::vector<std::string> corpus_sentences(const std::string& corpus, Rng& rng, size_t want) {
    require(!corpus.empty(), "this task needs a corpus (--corpus) for its haystack");
    std::vector<std::string> out;
    size_t pos = static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(corpus.size()) - 1));
    while (pos < corpus.size() && corpus[pos] != '.') ++pos;
    size_t guard = 0;
    while (out.size() < want && guard++ < want * 4 + 16) {
        if (pos + 1 >= corpus.size()) pos = 0;
        const size_t end = corpus.find_first_of(".!?", pos + 1);
        if (end == std::string::npos) {  // wrap around to the corpus start
            pos = 0;
            continue;
        }
        std::string s = corpus.substr(pos == 0 && corpus[0] != '.' ? 0 : pos + 1,
                                      end - (pos == 0 && corpus[0] != '.' ? 0 : pos + 1) + 1);
        pos = end;
        std::string t;  // collapse whitespace
        for (char c : s) {
            const bool sp = std::isspace(static_cast<unsigned char>(c));
            if (sp && (t.empty() || t.back() == ' ')) continue;
            t += sp ? ' ' : c;
        }
        if (t.size() > 3) out.push_back(t);
    }
    return out;
}

/// Largest n ≤ max_units such that build(n) has at most `length` tokens (build is monotone in n). Probes start
/// from secant estimates of the tokens per unit, then gallop and bisect, so that every text it tokenizes is
/// near `length` tokens long (a plain bisection from max_units / 2 tokenizes texts many times longer).
std::string fit(const std::function<std::string(size_t)>& build, size_t max_units, int64_t length, const Tokenizer& tok,
                int64_t* tokens) {
    std::map<size_t, int64_t> seen;
    auto count = [&](size_t n) {
        auto it = seen.find(n);
        if (it == seen.end())
            it = seen.emplace(n, static_cast<int64_t>(tok.encode(build(n), false, false).size())).first;
        return it->second;
    };
    const int64_t c0 = count(0);
    if (c0 > length) fail("a length of ", length, " tokens is too short for this task's template (needs ", c0, ")");
    size_t lo = 0, hi = max_units + 1;  // count(lo) <= length < count(hi); hi = max_units + 1: none found yet
    auto probe = [&](size_t n) {
        const bool fits = count(n) <= length;
        if (fits)
            lo = std::max(lo, n);
        else
            hi = std::min(hi, n);
        return fits;
    };
    size_t n = std::min<size_t>(max_units, 16);
    for (int it = 0; it < 4 && n > lo && n < hi; ++it) {
        probe(n);
        const double per_unit = static_cast<double>(count(n) - c0) / static_cast<double>(n);
        if (per_unit <= 0 || hi - lo <= 1) break;
        n = std::clamp(static_cast<size_t>(static_cast<double>(length - c0) / per_unit), lo + 1, hi - 1);
    }
    for (size_t step = std::max<size_t>(1, lo / 256); hi == max_units + 1;) {  // gallop up to a misfit
        const size_t m = std::min(max_units, lo + step);
        if (m == lo) break;  // everything fits
        if (probe(m)) step *= 2;
    }
    while (hi - lo > 1) probe(lo + (hi - lo) / 2);
    *tokens = count(lo);
    return build(lo);
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
    return s;
}

struct NiahSpec {
    bool noise_haystack;   // repeated noise sentences vs corpus prose
    bool needle_haystack;  // the haystack is made of distractor needles
    int keys, values, queries;
    bool uuid_keys, uuid_values;
};

TaskExample niah(const std::string& task, const NiahSpec& sp, int64_t length, const Tokenizer& tok,
                 const std::string& corpus, Rng& rng) {
    const std::string kind = sp.uuid_values ? "uuids" : "numbers";
    auto mk_key = [&] { return sp.uuid_keys ? rng.uuid() : rng.key(); };
    auto mk_val = [&] { return sp.uuid_values ? rng.uuid() : rng.number(); };
    std::vector<std::string> keys;
    std::vector<std::vector<std::string>> vals;
    for (int k = 0; k < sp.keys; ++k) {
        keys.push_back(mk_key());
        vals.emplace_back();
        for (int v = 0; v < (k < sp.queries ? sp.values : 1); ++v) vals.back().push_back(mk_val());
    }
    std::vector<std::string> needles;
    for (int k = 0; k < sp.keys; ++k)
        for (const auto& v : vals[k])
            needles.push_back("One of the special magic " + kind + " for " + keys[k] + " is: " + v + ".");
    std::shuffle(needles.begin(), needles.end(), rng.g);
    const size_t max_units = static_cast<size_t>(length);
    std::vector<std::string> hay;
    if (sp.noise_haystack)
        hay.assign(max_units, kNoise);
    else if (sp.needle_haystack)
        for (size_t i = 0; i < max_units; ++i)
            hay.push_back("One of the special magic " + kind + " for " + mk_key() + " is: " + mk_val() + ".");
    else
        hay = corpus_sentences(corpus, rng, max_units);
    // Needle depths: fractions of the haystack, fixed per example.
    std::vector<double> depth;
    for (size_t i = 0; i < needles.size(); ++i) depth.push_back(std::uniform_real_distribution<double>(0, 1)(rng.g));
    std::vector<std::string> query_keys(keys.begin(), keys.begin() + sp.queries);
    const std::string q = join(query_keys, ", ");
    const std::string question = "\nWhat are all the special magic " + kind + " for " + q +
                                 " mentioned in the provided text? The special magic " + kind + " for " + q +
                                 " mentioned in the provided text are";
    auto build = [&](size_t n) {
        std::vector<std::string> units(hay.begin(), hay.begin() + std::min(n, hay.size()));
        std::vector<std::pair<size_t, std::string>> ins;
        for (size_t i = 0; i < needles.size(); ++i)
            ins.emplace_back(static_cast<size_t>(depth[i] * units.size()), needles[i]);
        std::sort(ins.begin(), ins.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        for (const auto& [at, nd] : ins) units.insert(units.begin() + at, nd);
        return "Some special magic " + kind +
               " are hidden within the following text. Make sure to memorize it. I will "
               "quiz you about the " +
               kind + " afterwards.\n" + join(units, " ") + question;
    };
    TaskExample ex;
    ex.task = task;
    ex.input = fit(build, hay.size(), length, tok, &ex.input_tokens);
    ex.question = question;
    for (int k = 0; k < sp.queries; ++k) ex.answers.insert(ex.answers.end(), vals[k].begin(), vals[k].end());
    ex.max_new_tokens = sp.uuid_values ? 64 : 32;
    return ex;
}

/// RULER's variable tracking (App. B, num_hops 4) with `chains` interleaved chains, each starting from its own
/// 7-digit value; the question asks for chain 0's variables. With one chain, listing every assigned variable in
/// order answers it; with two or more, only following the chain does.
TaskExample variable_tracking(const std::string& task, int chains, int64_t length, const Tokenizer& tok, Rng& rng) {
    const int hops = 4;
    struct Statement {
        double depth;
        std::string text;
    };
    std::vector<Statement> statements;
    std::string asked_value;  // chain 0's value, which the question asks about
    std::vector<std::string> answers, used;
    auto fresh = [&](const std::function<std::string()>& draw) {
        std::string s = draw();
        while (std::find(used.begin(), used.end(), s) != used.end()) s = draw();
        used.push_back(s);
        return s;
    };
    for (int c = 0; c < chains; ++c) {
        const std::string value = fresh([&] { return rng.number(); });
        std::vector<std::string> names;
        for (int i = 0; i <= hops; ++i)
            names.push_back(fresh([&] {
                std::string s;
                for (int k = 0; k < 5; ++k) s += static_cast<char>('A' + rng.uniform(0, 25));
                return s;
            }));
        std::vector<double> depth;
        for (int i = 0; i <= hops; ++i) depth.push_back(std::uniform_real_distribution<double>(0, 1)(rng.g));
        std::sort(depth.begin(), depth.end());  // keep each chain in order
        for (int i = 0; i <= hops; ++i)
            statements.push_back({depth[i], i == 0 ? "VAR " + names[0] + " = " + value + "."
                                                   : "VAR " + names[i] + " = VAR " + names[i - 1] + "."});
        if (c == 0) asked_value = value, answers = names;
    }
    // Insert from the deepest statement up, so that earlier insertions do not shift later ones; ties keep the
    // chain order because the later statement of a tie goes in first.
    std::vector<size_t> order(statements.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return statements[a].depth > statements[b].depth || (statements[a].depth == statements[b].depth && a > b);
    });
    auto build = [&](size_t n) {
        std::vector<std::string> units(n, kNoise);
        for (size_t i : order)
            units.insert(units.begin() + static_cast<size_t>(statements[i].depth * n), statements[i].text);
        return variable_tracking_header() + join(units, " ") + variable_tracking_question(asked_value, hops + 1);
    };
    TaskExample ex;
    ex.task = task;
    ex.input = fit(build, static_cast<size_t>(length), length, tok, &ex.input_tokens);
    ex.question = variable_tracking_question(asked_value, hops + 1);
    ex.answers = answers;
    ex.max_new_tokens = 40;
    return ex;
}

TaskExample common_words(int64_t length, const Tokenizer& tok, Rng& rng) {
    // 10 common words appear 6 times each, uncommon words once (RULER cwe: freq_cw 30 / freq_ucw 3, scaled
    // down for short contexts).
    std::vector<std::string> pool(kWords, kWords + kNumWords);
    std::shuffle(pool.begin(), pool.end(), rng.g);
    std::vector<std::string> common(pool.begin(), pool.begin() + 10), rare(pool.begin() + 10, pool.end());
    const std::string question =
        "\nQuestion: What are the 10 most common words in the above list? Answer: The top 10 "
        "words that appear most often in the list are:";
    auto build = [&](size_t n_rare) {
        std::vector<std::string> list;
        for (int r = 0; r < 6; ++r) list.insert(list.end(), common.begin(), common.end());
        for (size_t i = 0; i < n_rare; ++i) list.push_back(rare[i % rare.size()] + std::to_string(i / rare.size()));
        std::mt19937_64 g(static_cast<uint64_t>(n_rare) * 7919 + 17);
        std::shuffle(list.begin(), list.end(), g);
        std::string s;
        for (size_t i = 0; i < list.size(); ++i) s += std::to_string(i + 1) + ". " + list[i] + " ";
        return "Below is a numbered list of words. In these words, some appear more often than others. Memorize the "
               "ones that appear most often.\n" +
               s + question;
    };
    TaskExample ex;
    ex.task = "cwe";
    ex.input = fit(build, static_cast<size_t>(length), length, tok, &ex.input_tokens);
    ex.question = question;
    ex.answers = common;
    ex.max_new_tokens = 80;
    return ex;
}

TaskExample frequent_words(int64_t length, const Tokenizer& tok, Rng& rng) {
    // Coded words drawn from a Zipf-like law (RULER fwe, alpha 2): the three most frequent are the answer.
    std::vector<std::string> vocab;
    for (int i = 0; i < 40; ++i) {
        std::string w;
        for (int c = 0; c < 4; ++c) w += static_cast<char>('a' + rng.uniform(0, 25));
        vocab.push_back(w);
    }
    std::vector<double> weights;
    for (int i = 0; i < 40; ++i) weights.push_back(1.0 / ((i + 1.0) * (i + 1.0)));
    const uint64_t draw_seed = rng.g();
    const std::string question =
        "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are "
        "the three most frequently appeared words in the above coded text? Answer: According "
        "to the coded text above, the three most frequently appeared words are:";
    auto build = [&](size_t n) {
        std::mt19937_64 g(draw_seed);
        std::discrete_distribution<int> d(weights.begin(), weights.end());
        std::vector<std::string> words;
        for (int r = 0; r < 3; ++r)  // the top three are always present
            for (int k = 0; k < 3 - r; ++k) words.push_back(vocab[r]);
        for (size_t i = 0; i < n; ++i) words.push_back(vocab[d(g)]);
        std::shuffle(words.begin(), words.end(), g);
        return "Read the following coded text and track the frequency of each coded word. Find the three most "
               "frequently "
               "appeared coded words. " +
               join(words, " ") + question;
    };
    TaskExample ex;
    ex.task = "fwe";
    ex.input = fit(build, static_cast<size_t>(length), length, tok, &ex.input_tokens);
    ex.question = question;
    // With few words the Zipf tail may tie with the top three; the answer is computed from the text itself.
    std::map<std::string, int> freq;
    {
        const std::string body = ex.input.substr(ex.input.find("coded words. ") + 13);
        size_t p = 0;
        while (p < body.size() && body[p] != '\n') {
            const size_t e = std::min(body.find(' ', p), body.find('\n', p));
            freq[body.substr(p, e - p)]++;
            if (e == std::string::npos || body[e] == '\n') break;
            p = e + 1;
        }
    }
    std::vector<std::pair<int, std::string>> by;
    for (const auto& [w, c] : freq) by.emplace_back(-c, w);
    std::sort(by.begin(), by.end());
    for (size_t i = 0; i < std::min<size_t>(3, by.size()); ++i) ex.answers.push_back(by[i].second);
    ex.max_new_tokens = 30;
    return ex;
}

TaskExample question_answering(int64_t length, const Tokenizer& tok, const std::string& corpus, Rng& rng) {
    // A fact about a made-up person hidden in corpus prose (RULER's qa uses SQuAD/HotpotQA documents; this
    // keeps the format with a generated fact so no dataset is needed).
    static const char* attrs[] = {"favorite color", "home town", "pet's name", "lucky number", "best friend"};
    const std::string attr = attrs[rng.uniform(0, 4)];
    const std::string name = std::string(1, static_cast<char>('A' + rng.uniform(0, 25))) + rng.word();
    const std::string value = attr == "lucky number" ? rng.number() : rng.word();
    const std::string fact = "The " + attr + " of " + name + " is " + value + ".";
    const auto hay = corpus_sentences(corpus, rng, static_cast<size_t>(length));
    const double depth = std::uniform_real_distribution<double>(0, 1)(rng.g);
    const std::string question = "\n\nQuestion: What is the " + attr + " of " + name + "? Answer:";
    auto build = [&](size_t n) {
        std::vector<std::string> units(hay.begin(), hay.begin() + std::min(n, hay.size()));
        units.insert(units.begin() + static_cast<size_t>(depth * units.size()), fact);
        return "Answer the question based on the given documents. Only give me the answer and do not output any other "
               "words.\n\nThe following are given documents.\n\n" +
               join(units, " ") + question;
    };
    TaskExample ex;
    ex.task = "qa";
    ex.input = fit(build, hay.size(), length, tok, &ex.input_tokens);
    ex.question = question;
    ex.answers = {value};
    ex.max_new_tokens = 16;
    return ex;
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

}  // namespace

const std::vector<std::string>& task_words() {
    static const std::vector<std::string> w(kWords, kWords + kNumWords);
    return w;
}

const std::vector<std::string>& task_names() {
    static const std::vector<std::string> n = {"niah_single_1",
                                               "niah_single_2",
                                               "niah_single_3",
                                               "niah_multikey_1",
                                               "niah_multikey_2",
                                               "niah_multikey_3",
                                               "niah_multivalue",
                                               "niah_multiquery",
                                               "vt",
                                               "vt_2",
                                               "cwe",
                                               "fwe",
                                               "qa"};
    return n;
}

void check_task_name(const std::string& name) {
    for (const auto& t : task_names())
        if (t == name) return;
    fail("unknown task '", name, "' (known: ", join(task_names(), ", "), ")");
}

std::string variable_tracking_header() {
    return "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
}

std::string variable_tracking_question(const std::string& value, int count) {
    return "\nQuestion: Find all variables that are assigned the value " + value +
           " in the text above. Answer: According to the chain(s) of variable assignment in the text above, " +
           std::to_string(count) + " variables are assigned the value " + value + ", they are:";
}

namespace {
/// The answer prefix of a question (TaskExample::answer_prefix): from its last " Answer:", else from the space
/// after its last "?", else empty.
std::string answer_prefix_of(const std::string& question) {
    const size_t a = question.rfind(" Answer:");
    if (a != std::string::npos) return question.substr(a);
    const size_t q = question.rfind("? ");
    return q == std::string::npos ? std::string() : question.substr(q + 1);
}
}  // namespace

TaskExample make_task_example(const std::string& task, int64_t length, const Tokenizer& tok, const std::string& corpus,
                              uint64_t seed) {
    check_task_name(task);
    require(length >= 32, "task length ", length, " is too short (at least 32 tokens)");
    Rng rng(mix(mix(seed, std::hash<std::string>{}(task)), static_cast<uint64_t>(length)));
    static const std::map<std::string, NiahSpec> niahs = {
        {"niah_single_1", {true, false, 1, 1, 1, false, false}},
        {"niah_single_2", {false, false, 1, 1, 1, false, false}},
        {"niah_single_3", {false, false, 1, 1, 1, false, true}},
        {"niah_multikey_1", {false, false, 4, 1, 1, false, false}},
        {"niah_multikey_2", {false, true, 1, 1, 1, false, false}},
        {"niah_multikey_3", {false, true, 1, 1, 1, true, true}},
        {"niah_multivalue", {false, false, 1, 4, 1, false, false}},
        {"niah_multiquery", {false, false, 4, 1, 4, false, false}},
    };
    TaskExample ex;
    try {
        if (auto it = niahs.find(task); it != niahs.end())
            ex = niah(task, it->second, length, tok, corpus, rng);
        else if (task == "vt")
            ex = variable_tracking(task, 1, length, tok, rng);
        else if (task == "vt_2")
            ex = variable_tracking(task, 2, length, tok, rng);
        else if (task == "cwe")
            ex = common_words(length, tok, rng);
        else if (task == "fwe")
            ex = frequent_words(length, tok, rng);
        else
            ex = question_answering(length, tok, corpus, rng);
    } catch (const Error& e) { fail("task ", task, ": ", e.what()); }
    ex.answer_prefix = answer_prefix_of(ex.question);
    return ex;
}

double string_match_all(const std::string& prediction, const std::vector<std::string>& answers) {
    if (answers.empty()) return 0;
    const std::string p = lower(prediction);
    double hit = 0;
    for (const auto& a : answers) hit += p.find(lower(a)) != std::string::npos;
    return hit / answers.size();
}

double string_match_part(const std::string& prediction, const std::vector<std::string>& answers) {
    const std::string p = lower(prediction);
    for (const auto& a : answers)
        if (p.find(lower(a)) != std::string::npos) return 1;
    return 0;
}

double task_score(const std::string& task, const std::string& prediction, const std::vector<std::string>& answers) {
    return task == "qa" ? string_match_part(prediction, answers) : string_match_all(prediction, answers);
}

}  // namespace kvsieve
