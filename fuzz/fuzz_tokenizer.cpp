// Both tokenizer families on any text: SentencePiece-style (stories260K) and byte-level BPE with the smollm
// pre-tokenizer (the bundled tiny Qwen3 vocabulary): encode with special tokens parsed, then decode every id.
#include <memory>

#include "fuzz_input.h"
#include "io/gguf.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace {
struct Tokenizers {
    std::unique_ptr<kvsieve::GGUFFile> a, b;
    std::unique_ptr<kvsieve::Tokenizer> spm, bpe;
    Tokenizers() {
        a = std::make_unique<kvsieve::GGUFFile>(kvsieve::fuzz::source_path("tests/data/models/stories260K.gguf"));
        b = std::make_unique<kvsieve::GGUFFile>(kvsieve::fuzz::test_model_path("tiny-qwen3-f32.gguf"));
        spm = kvsieve::Tokenizer::from_gguf(*a);
        bpe = kvsieve::Tokenizer::from_gguf(*b);
    }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const Tokenizers t;
    const std::string text(reinterpret_cast<const char*>(data), size);
    for (const kvsieve::Tokenizer* tok : {t.spm.get(), t.bpe.get()}) {
        try {
            const auto ids = tok->encode(text, true, size % 2 == 0);
            for (int32_t id : ids) tok->token_to_piece(id, true);
        } catch (const kvsieve::Error&) {  // invalid UTF-8 for the byte-level BPE
        }
    }
    return 0;
}
