#include "train/data.h"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <tuple>

#include "eval/tasks.h"
#include "text/tokenizer.h"
#include "train/palindrome.h"
#include "util/error.h"

namespace kvsieve::train {

uint64_t next_random(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
    uint64_t s = a * 0x100000001B3ull ^ (b + 0x632BE59BD9B4E019ull);
    next_random(s);
    return next_random(s);
}

namespace {
double uniform(uint64_t& st) { return static_cast<double>(next_random(st) >> 11) / 9007199254740992.0; }

size_t pick(const std::vector<double>& w, uint64_t& st) {
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    double u = uniform(st) * total;
    for (size_t i = 0; i < w.size(); ++i) {
        if (u < w[i]) return i;
        u -= w[i];
    }
    return w.size() - 1;
}
}  // namespace

TextStream::TextStream(const std::vector<std::string>& files, const Tokenizer& tok, double holdout_fraction)
    : bos_(tok.vocab().bos) {
    require(holdout_fraction >= 0 && holdout_fraction < 1, "holdout fraction must be in [0, 1), got ",
            holdout_fraction);
    for (size_t i = 0; i < files.size(); ++i) {
        require(!files[i].empty(), "text file ", i + 1, " is empty");
        // Split at the first newline after (1 − holdout) of the bytes, so the held-out part is whole lines.
        size_t cut = files[i].size() - static_cast<size_t>(holdout_fraction * static_cast<double>(files[i].size()));
        if (cut < files[i].size()) {
            const size_t nl = files[i].find('\n', cut);
            cut = nl == std::string::npos ? files[i].size() : nl + 1;
        }
        const auto tr = tok.encode(files[i].substr(0, cut), false);
        train_.push_back(bos_);
        train_.insert(train_.end(), tr.begin(), tr.end());
        heldout_text_.push_back(files[i].substr(cut));
        heldout_.push_back(heldout_text_.back().empty() ? std::vector<int32_t>{}
                                                        : tok.encode(heldout_text_.back(), false));
    }
    require(train_.size() >= 2, "the training text has fewer than 2 tokens");
}

Sequence TextStream::window(int64_t n, uint64_t& st) const {
    Sequence s;
    s.tokens.push_back(bos_);
    const int64_t span = n - 1, len = static_cast<int64_t>(train_.size());
    const int64_t start = len > span ? static_cast<int64_t>(next_random(st) % static_cast<uint64_t>(len - span)) : 0;
    for (int64_t i = 0; i < span && start + i < len; ++i) s.tokens.push_back(train_[start + i]);
    s.weight.assign(s.tokens.size(), 1.0f);
    return s;
}

std::vector<Sequence> TextStream::heldout_windows(size_t i, int64_t n, int64_t count) const {
    const std::vector<int32_t>& ho = heldout_.at(i);
    std::vector<Sequence> out;
    for (int64_t start = 0;
         start + n - 1 <= static_cast<int64_t>(ho.size()) && static_cast<int64_t>(out.size()) < count; start += n - 1) {
        Sequence s;
        s.tokens.push_back(bos_);
        s.tokens.insert(s.tokens.end(), ho.begin() + start, ho.begin() + start + n - 1);
        s.weight.assign(s.tokens.size(), 1.0f);
        out.push_back(std::move(s));
    }
    return out;
}

Sequence synthetic_sequence(const std::string& task, int64_t length, const Tokenizer& tok, const std::string& haystack,
                            uint64_t seed, float prompt_weight, float answer_weight, int64_t* answer_begin) {
    const TaskExample ex = make_task_example(task, length, tok, haystack, seed);
    std::string ans;
    for (size_t i = 0; i < ex.answers.size(); ++i) ans += (i ? ", " : "") + ex.answers[i];
    const auto prompt = tok.encode(ex.input, true);
    auto full = tok.encode(ex.input + " " + ans + ".", true);
    // The answer must continue the prompt's tokens; if a merge crossed the boundary, append the answer's own tokens.
    if (full.size() <= prompt.size() || !std::equal(prompt.begin(), prompt.end(), full.begin())) {
        full = prompt;
        const auto a = tok.encode(ans + ".", false);
        full.insert(full.end(), a.begin(), a.end());
    }
    full.push_back(tok.vocab().eos);
    Sequence s;
    s.tokens = std::move(full);
    s.weight.assign(s.tokens.size(), prompt_weight);
    for (size_t i = prompt.size(); i < s.tokens.size(); ++i) s.weight[i] = answer_weight;
    if (answer_begin) *answer_begin = static_cast<int64_t>(prompt.size());
    return s;
}

namespace {

const char* const kReconstructionInstruction = "\n\nRepeat the previous context exactly.\n";

/// Length n of the copied body for a reconstruction row of at most `length` tokens (BOS, n, instruction, n, EOS):
/// drawn in [room/2, room], room = (length − 2 − instruction) / 2. Throws Error below 8 tokens of room.
int64_t reconstruction_body_length(int64_t length, size_t instr, const char* task, uint64_t& st) {
    const int64_t room = (length - 2 - static_cast<int64_t>(instr)) / 2;
    require(room >= 8, "a length of ", length, " tokens is too short for the ", task, " task");
    return room / 2 + static_cast<int64_t>(next_random(st) % static_cast<uint64_t>(room - room / 2 + 1));
}

/// BOS, body, instruction, body, EOS; the second body and EOS weigh `answer_weight`, the rest `prompt_weight`.
Sequence reconstruction_sequence(const std::vector<int32_t>& body, const std::vector<int32_t>& instr, const Vocab& v,
                                 float prompt_weight, float answer_weight, int64_t* answer_begin) {
    Sequence s;
    s.tokens.push_back(v.bos);
    s.tokens.insert(s.tokens.end(), body.begin(), body.end());
    s.tokens.insert(s.tokens.end(), instr.begin(), instr.end());
    const size_t a0 = s.tokens.size();
    s.tokens.insert(s.tokens.end(), body.begin(), body.end());
    s.tokens.push_back(v.eos);
    s.weight.assign(s.tokens.size(), prompt_weight);
    for (size_t i = a0; i < s.tokens.size(); ++i) s.weight[i] = answer_weight;
    if (answer_begin) *answer_begin = static_cast<int64_t>(a0);
    return s;
}

/// A 5-letter capital name, the variable format of eval/tasks.h's variable tracking.
std::string capital_name(uint64_t& st) {
    std::string s;
    for (int k = 0; k < 5; ++k) s += static_cast<char>('A' + next_random(st) % 26);
    return s;
}

}  // namespace

Sequence repeat_sequence(const TextStream& text, const Tokenizer& tok, int64_t length, uint64_t& st,
                         float prompt_weight, float answer_weight) {
    const auto instr = tok.encode(kReconstructionInstruction, false);
    const int64_t n = reconstruction_body_length(length, instr.size(), kRepeatTask, st);
    const Sequence w = text.window(n + 1, st);  // BOS + n tokens
    const std::vector<int32_t> body(w.tokens.begin() + 1, w.tokens.end());
    return reconstruction_sequence(body, instr, tok.vocab(), prompt_weight, answer_weight, nullptr);
}

Sequence copy_sequence(const Tokenizer& tok, int64_t length, uint64_t& st, float prompt_weight, float answer_weight,
                       int64_t* answer_begin) {
    const Vocab& v = tok.vocab();
    std::vector<int32_t> normal;  // ids of normal tokens (O(|V|), small beside a forward pass over the row)
    for (int32_t i = 0; i < v.size(); ++i)
        if ((v.types.empty() || v.types[i] == TokenType::kNormal) && i != v.bos && i != v.eos) normal.push_back(i);
    require(!normal.empty(), "the vocabulary has no normal tokens for the copy task");
    const auto instr = tok.encode(kReconstructionInstruction, false);
    const int64_t n = reconstruction_body_length(length, instr.size(), kCopyTask, st);
    std::vector<int32_t> body(static_cast<size_t>(n));
    for (auto& t : body) t = normal[next_random(st) % normal.size()];
    return reconstruction_sequence(body, instr, v, prompt_weight, answer_weight, answer_begin);
}

Sequence copy_codes_sequence(const Tokenizer& tok, int64_t length, uint64_t& st, float prompt_weight,
                             float answer_weight, int64_t* answer_begin) {
    const auto instr = tok.encode(kReconstructionInstruction, false);
    const int64_t n = reconstruction_body_length(length, instr.size(), kCopyCodesTask, st);
    std::string text;
    std::vector<int32_t> body;
    while (static_cast<int64_t>(body.size()) < n) {  // ~8 tokens per code; a few words of slack per round
        for (int64_t w = 0; w < (n - static_cast<int64_t>(body.size())) / 4 + 2; ++w) {
            const bool number = next_random(st) % 2 == 0;
            text += ' ';
            if (!number) text += capital_name(st);
            for (int c = 0; number && c < 7; ++c) text += static_cast<char>('0' + next_random(st) % 10);
        }
        body = tok.encode(text, false);
    }
    body.resize(static_cast<size_t>(n));
    return reconstruction_sequence(body, instr, tok.vocab(), prompt_weight, answer_weight, answer_begin);
}

Sequence copy_task_sequence(const std::string& task, const Tokenizer& tok, int64_t length, uint64_t& st,
                            float prompt_weight, float answer_weight, int64_t* answer_begin) {
    if (task == kCopyTask) return copy_sequence(tok, length, st, prompt_weight, answer_weight, answer_begin);
    if (task == kCopyCodesTask) return copy_codes_sequence(tok, length, st, prompt_weight, answer_weight, answer_begin);
    fail("'", task, "' is not a copy task (", kCopyTask, ", ", kCopyCodesTask, ")");
}

namespace {

/// The text of an associative-recall row: the pairs are listed, then recalled one by one by key.
struct RecallFormat {
    const char* task;
    const char* header;                                ///< before the list
    std::function<std::string(uint64_t&)> key, value;  ///< draw a key / a value
    bool distinct_values;                              ///< values distinct from each other and from the keys
    std::function<std::string(const std::string&, const std::string&)> line;  ///< a listed pair (key, value)
    std::function<std::string(const std::string&)> query;  ///< a recall line up to its answer " value."
};

/// The text a token sequence spells (its pieces joined) and where each token starts in it; start has one more
/// entry than `tokens`, the text's length.
struct Spelling {
    std::string text;
    std::vector<size_t> start;
};
Spelling spell(const Tokenizer& tok, const std::vector<int32_t>& tokens) {
    Spelling sp;
    sp.start.reserve(tokens.size() + 1);
    for (int32_t t : tokens) sp.start.push_back(sp.text.size()), sp.text += tok.token_to_piece(t);
    sp.start.push_back(sp.text.size());
    return sp;
}

/// A row of `f` of at most `length` tokens; layout and weights as recall_sequence() documents.
Sequence recall_format_sequence(const RecallFormat& f, const Tokenizer& tok, int64_t length, uint64_t& st,
                                float prompt_weight, float answer_weight, int64_t* answer_begin) {
    // Draw more key-value pairs than can fit, then keep the largest prefix that does.
    std::vector<std::string> keys, vals;
    std::set<std::string> seen;
    const int64_t most = std::max<int64_t>(2, length / 16);
    for (int64_t guard = 0; static_cast<int64_t>(keys.size()) < most && guard < most * 8; ++guard) {
        std::string k = f.key(st);
        if (!seen.insert(k).second) continue;
        std::string v = f.value(st);
        while (f.distinct_values && !seen.insert(v).second) v = f.value(st);
        keys.push_back(k), vals.push_back(v);
    }
    std::vector<size_t> order(keys.size());
    std::iota(order.begin(), order.end(), size_t{0});
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[next_random(st) % i]);
    // The text, and the recalled values in the order they are asked for.
    std::vector<std::string> asked;
    auto build = [&](size_t m) {
        std::string text = f.header;
        for (size_t i = 0; i < m; ++i) text += (i ? " " : "") + f.line(keys[i], vals[i]);
        text += "\nRecall them.\n";
        asked.clear();
        for (size_t i : order)
            if (i < m) {
                text += f.query(keys[i]) + " " + vals[i] + ".\n";
                asked.push_back(vals[i]);
            }
        return text;
    };
    auto fits = [&](size_t m) { return static_cast<int64_t>(tok.encode(build(m), true).size()) + 1 <= length; };
    require(keys.size() >= 2 && fits(2), "a length of ", length, " tokens is too short for the ", f.task, " task");
    size_t lo = 2, hi = keys.size();  // the token count grows with m: binary search for the largest that fits
    while (lo < hi) {
        const size_t mid = (lo + hi + 1) / 2;
        if (fits(mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    const std::string text = build(lo);
    Sequence s;
    s.tokens = tok.encode(text, true);
    s.tokens.push_back(tok.vocab().eos);
    s.weight.assign(s.tokens.size(), prompt_weight);
    // Each recalled value (" 1234567.") is found, in order, in the text the tokens spell after the list; its
    // tokens are those that start and end on its bounds. A value whose tokens merged with a neighbour is skipped.
    const auto [spelled, start] = spell(tok, s.tokens);
    size_t pos = spelled.find("\nRecall them.\n");
    int64_t first = -1;
    for (const auto& v : asked) {
        const size_t p = pos == std::string::npos ? pos : spelled.find(" " + v + ".", pos);
        if (p == std::string::npos) break;
        pos = p + v.size() + 2;
        const auto a = std::lower_bound(start.begin(), start.end(), p),
                   b = std::lower_bound(start.begin(), start.end(), pos);
        if (a == start.end() || b == start.end() || *a != p || *b != pos) continue;
        for (auto i = a - start.begin(); i < b - start.begin(); ++i) s.weight[static_cast<size_t>(i)] = answer_weight;
        if (first < 0) first = a - start.begin();
    }
    if (answer_begin) *answer_begin = first;
    return s;
}

}  // namespace

Sequence recall_sequence(const Tokenizer& tok, int64_t length, uint64_t& st, float prompt_weight, float answer_weight,
                         int64_t* answer_begin) {
    static const RecallFormat f{
        kRecallTask,
        "Some special magic numbers are hidden in the following list. Memorize them.\n",
        [](uint64_t& r) {
            const auto& words = task_words();
            const std::string second =
                words[next_random(r) % words.size()];  // drawn first, as the rows made so far had it
            return words[next_random(r) % words.size()] + "-" + second;
        },
        [](uint64_t& r) { return std::to_string(1000000 + next_random(r) % 9000000); },
        false,
        [](const std::string& k, const std::string& v) {
            return "One of the special magic numbers for " + k + " is: " + v + ".";
        },
        [](const std::string& k) { return "The special magic number for " + k + " is:"; }};
    return recall_format_sequence(f, tok, length, st, prompt_weight, answer_weight, answer_begin);
}

namespace {
/// The recall format of the link tasks: links "VAR X = VAR Y." recalled as "The variable assigned VAR Y is: X.",
/// keys and values (all distinct) drawn by `draw`.
RecallFormat link_format(const char* task, std::function<std::string(uint64_t&)> draw) {
    return {task,
            "Memorize the variable assignments in the following text.\n",
            draw,
            draw,
            true,
            [](const std::string& k, const std::string& v) { return "VAR " + v + " = VAR " + k + "."; },
            [](const std::string& k) { return "The variable assigned VAR " + k + " is:"; }};
}
}  // namespace

Sequence links_sequence(const Tokenizer& tok, int64_t length, uint64_t& st, float prompt_weight, float answer_weight,
                        int64_t* answer_begin) {
    static const RecallFormat f = link_format(kLinksTask, capital_name);
    return recall_format_sequence(f, tok, length, st, prompt_weight, answer_weight, answer_begin);
}

namespace {

/// The words of at least 3 lower-case letters that `tok` encodes, after "VAR ", as one token each (vocabulary
/// order); computed once per vocabulary (keyed by a hash of its token strings).
const std::vector<std::string>& single_token_words(const Tokenizer& tok) {
    static std::mutex mu;
    static std::map<size_t, std::vector<std::string>> cache;
    const Vocab& v = tok.vocab();
    size_t key = v.tokens.size();
    for (const auto& t : v.tokens) key = key * 1000003u ^ std::hash<std::string>{}(t);
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    const auto prefix = tok.encode("VAR", false);
    std::vector<std::string> words;
    for (int32_t id = 0; id < v.size(); ++id) {
        const std::string piece = tok.token_to_piece(id);
        if (piece.size() < 4 || piece[0] != ' ') continue;
        if (!std::all_of(piece.begin() + 1, piece.end(), [](char c) { return c >= 'a' && c <= 'z'; })) continue;
        const auto ids = tok.encode("VAR" + piece, false);
        if (ids.size() == prefix.size() + 1 && ids.back() == id) words.push_back(piece.substr(1));
    }
    return cache.emplace(key, std::move(words)).first->second;
}

}  // namespace

Sequence links_words_sequence(const Tokenizer& tok, int64_t length, uint64_t& st, float prompt_weight,
                              float answer_weight, int64_t* answer_begin) {
    const auto& words = single_token_words(tok);
    require(words.size() >= 8, "the vocabulary has ", words.size(), " single-token words; the ", kLinksWordsTask,
            " task needs 8");
    const RecallFormat f =
        link_format(kLinksWordsTask, [&words](uint64_t& r) { return words[next_random(r) % words.size()]; });
    return recall_format_sequence(f, tok, length, st, prompt_weight, answer_weight, answer_begin);
}

namespace {
/// One chain of the chains task: a value and the names that pass it on, and each statement's depth in the text.
struct Chain {
    std::string value;
    std::vector<std::string> names;
    std::vector<double> depth;  // of statements 0..hops, sorted when the text is built
};

/// The text of the first m chains: their statements by depth, then the questions of those chains in the order
/// `asked` gives; each answer's span of the text into answer_spans (when given).
std::string chains_text(const std::vector<Chain>& chains, const std::vector<size_t>& asked, int hops, size_t m,
                        std::vector<std::pair<size_t, size_t>>* answer_spans) {
    std::vector<std::tuple<double, size_t, int>> order;  // depth, chain, hop
    for (size_t c = 0; c < m; ++c) {
        std::vector<double> d(chains[c].depth.begin(), chains[c].depth.begin() + hops + 1);
        std::sort(d.begin(), d.end());
        for (int i = 0; i <= hops; ++i) order.emplace_back(d[static_cast<size_t>(i)], c, i);
    }
    std::sort(order.begin(), order.end());
    std::string text = variable_tracking_header();
    for (size_t k = 0; k < order.size(); ++k) {
        const auto& [d, c, i] = order[k];
        const Chain& ch = chains[c];
        text += (k ? " " : "") + ("VAR " + ch.names[static_cast<size_t>(i)] + " = ") +
                (i == 0 ? ch.value : "VAR " + ch.names[static_cast<size_t>(i) - 1]) + ".";
    }
    for (size_t c : asked) {
        if (c >= m) continue;
        text += variable_tracking_question(chains[c].value, hops + 1);
        const size_t a = text.size();
        for (int i = 0; i <= hops; ++i) text += (i ? ", " : " ") + chains[c].names[static_cast<size_t>(i)];
        text += ".";
        if (answer_spans) answer_spans->emplace_back(a, text.size());
    }
    return text;
}

/// Gives answer_weight to the tokens of s that overlap an answer span of `text` (" A, B, C."), found in order in
/// the text the tokens spell (their pieces may differ from `text` by BOS and a leading space, never inside a
/// statement or an answer); returns the first such token (−1: none). Throws Error when an answer is not found.
int64_t weight_chain_answers(const Tokenizer& tok, const std::string& text,
                             const std::vector<std::pair<size_t, size_t>>& spans, float answer_weight, Sequence& s) {
    const auto [spelled, start] = spell(tok, s.tokens);
    size_t pos = 0;
    int64_t first = -1;
    for (const auto& [a, b] : spans) {
        const std::string ans = text.substr(a, b - a);
        const size_t p = spelled.find(ans, pos);
        require(p != std::string::npos, "chains: answer '", ans, "' not found in the row's tokens");
        pos = p + ans.size();
        for (size_t i = 0; i < s.tokens.size(); ++i)
            if (start[i] < pos && start[i + 1] > p) {
                s.weight[i] = answer_weight;
                if (first < 0) first = static_cast<int64_t>(i);
            }
    }
    return first;
}
}  // namespace

Sequence chains_sequence(const Tokenizer& tok, int64_t length, uint64_t& st, float prompt_weight, float answer_weight,
                         int64_t* answer_begin) {
    int hops = 1 + static_cast<int>(next_random(st) % 4);
    std::vector<Chain> chains;
    std::set<std::string> used;
    auto fresh = [&](auto draw) {
        std::string x = draw();
        while (!used.insert(x).second) x = draw();
        return x;
    };
    std::vector<size_t> asked;  // chain indices in the order their questions come
    auto fits = [&](size_t m) {
        return static_cast<int64_t>(tok.encode(chains_text(chains, asked, hops, m, nullptr), true).size()) + 1 <=
               length;
    };
    const size_t most = 16;
    for (size_t c = 0; c < most; ++c) {
        Chain ch;
        ch.value = fresh([&] { return std::to_string(1000000 + next_random(st) % 9000000); });
        for (int i = 0; i < 5; ++i) ch.names.push_back(fresh([&] { return capital_name(st); }));
        for (int i = 0; i < 5; ++i) ch.depth.push_back(uniform(st));
        chains.push_back(std::move(ch));
    }
    asked.resize(most);
    std::iota(asked.begin(), asked.end(), size_t{0});
    for (size_t i = asked.size(); i > 1; --i) std::swap(asked[i - 1], asked[next_random(st) % i]);
    while (hops > 1 && !fits(2)) --hops;  // fewer hops where two chains of the drawn count do not fit
    require(fits(2), "a length of ", length, " tokens is too short for the ", kChainsTask, " task");
    size_t m = 2;
    while (m < most && fits(m + 1)) ++m;
    std::vector<std::pair<size_t, size_t>> spans;
    const std::string text = chains_text(chains, asked, hops, m, &spans);
    Sequence s;
    s.tokens = tok.encode(text, true);
    s.tokens.push_back(tok.vocab().eos);
    s.weight.assign(s.tokens.size(), prompt_weight);
    const int64_t first = weight_chain_answers(tok, text, spans, answer_weight, s);
    if (answer_begin) *answer_begin = first;
    return s;
}

RecallStyleMaker recall_style_maker(const std::string& task) {
    if (task == kRecallTask) return recall_sequence;
    if (task == kLinksTask) return links_sequence;
    if (task == kLinksWordsTask) return links_words_sequence;
    if (task == kChainsTask) return chains_sequence;
    if (task == kPalindromeTask) return palindrome_sequence;
    if (task == kPalindromeTokensTask) return palindrome_tokens_sequence;
    if (task == kPalindromeTokensMixedTask) return palindrome_tokens_mixed_sequence;
    fail("'", task,
         "' is not a recall-style task (recall, links, links_words, chains, palindrome, palindrome_tokens, "
         "palindrome_tokens_mixed)");
}

namespace {
/// The longest prompt make_batch() draws for an eval task in rows of T tokens (a margin left for the answer).
int64_t longest_prompt(int64_t T) { return T - std::max<int64_t>(32, T / 16); }
}  // namespace

bool task_fits_length(const std::string& task, int64_t T, const Tokenizer& tok, const std::string& haystack) {
    uint64_t st = 1;
    try {
        if (task == kRepeatTask || is_copy_task(task))
            (void)reconstruction_body_length(T, tok.encode(kReconstructionInstruction, false).size(), task.c_str(), st);
        else if (is_recall_style_task(task))
            (void)recall_style_maker(task)(tok, T, st, 1, 1, nullptr);
        else
            (void)make_task_example(task, std::max<int64_t>(std::max<int64_t>(64, T / 2), longest_prompt(T)), tok,
                                    haystack, 1);
    } catch (const Error&) { return false; }
    return true;
}

Batch make_batch(const MixSpec& mix, const TextStream& text, const Tokenizer& tok, const std::string& haystack,
                 uint64_t seed, int64_t step) {
    require(!mix.lengths.empty(), "no sequence lengths given");
    uint64_t st = mix_seed(seed, static_cast<uint64_t>(step));
    std::vector<double> lw = mix.length_weights;
    if (lw.empty()) lw.assign(mix.lengths.size(), 1.0);
    const int64_t T = mix.lengths[pick(lw, st)];
    const int64_t B = std::max<int64_t>(1, mix.tokens_per_batch / T);
    std::vector<std::string> names;
    std::vector<double> tw;
    for (const auto& [n, w] : mix.tasks) names.push_back(n), tw.push_back(w);
    std::vector<Sequence> rows;
    Batch b;
    for (int64_t r = 0; r < B; ++r) {
        if (!names.empty() && uniform(st) < mix.synthetic_fraction) {
            const std::string& task = names[pick(tw, st)];
            if (task == kRepeatTask) {
                rows.push_back(repeat_sequence(text, tok, T, st, mix.prompt_weight, mix.answer_weight));
                ++b.n_synthetic;
                continue;
            }
            if (is_recall_style_task(task)) {
                try {
                    const auto make = recall_style_maker(task);
                    rows.push_back(make(tok, T, st, mix.prompt_weight, mix.answer_weight, nullptr));
                    ++b.n_synthetic;
                } catch (const Error&) {  // too short for two needles: a text row instead
                    rows.push_back(text.window(T, st));
                }
                continue;
            }
            if (is_copy_task(task)) {
                rows.push_back(copy_task_sequence(task, tok, T, st, mix.prompt_weight, mix.answer_weight));
                ++b.n_synthetic;
                continue;
            }
            // Prompts fill the window up to a margin for the answer; shorter prompts teach position independence.
            const int64_t lo = std::max<int64_t>(64, T / 2), hi = std::max<int64_t>(lo, longest_prompt(T));
            const int64_t len = lo + static_cast<int64_t>(next_random(st) % static_cast<uint64_t>(hi - lo + 1));
            const uint64_t ex_seed = next_random(st);
            Sequence s;
            try {
                s = synthetic_sequence(task, len, tok, haystack, ex_seed, mix.prompt_weight, mix.answer_weight);
            } catch (const Error&) {  // the task's template does not fit this length: a text row instead
                rows.push_back(text.window(T, st));
                continue;
            }
            if (static_cast<int64_t>(s.tokens.size()) > T) {  // the answer ran past the window: drop its tail
                s.tokens.resize(T);
                s.weight.resize(T);
            }
            rows.push_back(std::move(s));
            ++b.n_synthetic;
        } else {
            rows.push_back(text.window(T, st));
        }
    }
    b.B = B;
    b.T = T;
    b.tokens.assign(B * T, tok.vocab().eos);
    b.weight.assign(B * T, 0.0f);
    for (int64_t r = 0; r < B; ++r)
        for (size_t i = 0; i < rows[r].tokens.size(); ++i) {
            b.tokens[r * T + static_cast<int64_t>(i)] = rows[r].tokens[i];
            b.weight[r * T + static_cast<int64_t>(i)] = rows[r].weight[i];
        }
    return b;
}

}  // namespace kvsieve::train
