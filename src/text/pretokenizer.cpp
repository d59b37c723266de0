#include "text/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <new>
#include <utility>

#include "util/error.h"

namespace kvsieve {

namespace {
// Regexes of the pre-tokenizers, as defined by each model's tokenizer.json (the case-insensitive group
// of the Llama 3 / Qwen2 patterns written out with character classes).
const char* kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Cased letters (Unicode category LC) as DeepSeek-LLM's tokenizer.json lists them, written as code points
// so that no editor or tool can normalise the characters (several are NFC-unstable, e.g. U+1F7D, U+212A).
const char* kDeepseekLetters =
    "\\s?["
    "\\x{41}-\\x{5A}\\x{61}-\\x{7A}\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}"
    "\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}"
    "\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"
    "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"
    "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"
    "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
    "\\x{1E900}-\\x{1E943}"
    "]+";
const char* kCjk = "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";
}  // namespace

struct PreTokenizer::Compiled {
    pcre2_code* code = nullptr;
    ~Compiled() {
        if (code) pcre2_code_free(code);
    }
};

PreTokenizer PreTokenizer::for_name(const std::string& pre) {
    auto in = [&](std::initializer_list<const char*> names) {
        for (const char* n : names)
            if (pre == n) return true;
        return false;
    };
    if (in({"default"})) return PreTokenizer({"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"});
    if (in({"llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe"})) {
        PreTokenizer p({kLlama3});
        p.ignore_merges_ = in({"llama3", "llama-v3", "llama-bpe", "falcon3"});
        return p;
    }
    if (in({"qwen2", "stablelm2", "deepseek-r1-qwen", "hunyuan"})) return PreTokenizer({kQwen2});
    if (in({"deepseek-llm"}))
        return PreTokenizer(
            {"[\\r\\n]", kDeepseekLetters,
             "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+", "\\s+$", kCjk,
             "\\p{N}+"});
    if (in({"deepseek-coder"})) return PreTokenizer({"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"});
    if (in({"falcon"})) return PreTokenizer({"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"});
    if (in({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}))
        return PreTokenizer({"\\p{N}", kGpt2});
    if (in({"gpt-2", "gpt2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de",
            "jina-v2-code", "gigachat", "roberta-bpe", "trillion"}))
        return PreTokenizer({kGpt2});
    fail("unknown pre-tokenizer '", pre, "' (tokenizer.ggml.pre)");
}

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes) {
    for (const auto& r : regexes) {
        auto c = std::make_unique<Compiled>();
        int err = 0;
        PCRE2_SIZE off = 0;
        c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(r.c_str()), r.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &off, nullptr);
        if (!c->code) {
            PCRE2_UCHAR buf[256];
            pcre2_get_error_message(err, buf, sizeof buf);
            fail("pre-tokenizer regex does not compile at offset ", off, ": ", reinterpret_cast<char*>(buf));
        }
        pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is the fallback
        re_.push_back(std::move(c));
    }
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string> PreTokenizer::split(const std::string& text) const {
    std::vector<std::pair<size_t, size_t>> pieces{{0, text.size()}};
    if (text.empty()) return {};
    bool checked = false;  // the UTF-8 check runs on the first match only (PCRE2_NO_UTF_CHECK afterwards)
    for (const auto& re : re_) {
        // Match data per call, so that one tokenizer may split texts on several threads at once.
        std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md_owner(
            pcre2_match_data_create_from_pattern(re->code, nullptr), pcre2_match_data_free);
        pcre2_match_data* md = md_owner.get();
        if (!md) throw std::bad_alloc();
        std::vector<std::pair<size_t, size_t>> next;
        for (const auto& [s, e] : pieces) {
            const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + s);
            const size_t len = e - s;
            size_t last = 0, start = 0;
            while (start < len) {
                const uint32_t opts = checked ? PCRE2_NO_UTF_CHECK : 0;
                const int rc = pcre2_match(re->code, subject, len, start, opts, md, nullptr);
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
                        fail("text is not valid UTF-8 (byte ", pcre2_get_startchar(md), ")");
                    fail("pre-tokenizer regex failed with PCRE2 error ", rc);
                }
                checked = true;
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
                const size_t ms = ov[0], me = ov[1];
                if (me == ms) {  // empty match: step one character
                    start = ms + 1;
                    while (start < len && (text[s + start] & 0xC0) == 0x80) ++start;
                    continue;
                }
                if (ms > last) next.emplace_back(s + last, s + ms);
                next.emplace_back(s + ms, s + me);
                last = start = me;
            }
            if (last < len) next.emplace_back(s + last, e);
            checked = true;
        }
        pieces = std::move(next);
    }
    std::vector<std::string> out;
    out.reserve(pieces.size());
    for (const auto& [s, e] : pieces) out.emplace_back(text, s, e - s);
    return out;
}

}  // namespace kvsieve
