// The GGUF reader, the model hyperparameters and the tokenizer built from a file: any bytes give a model or one
// Error, never a crash.
#include "fuzz_input.h"
#include "io/gguf.h"
#include "io/model_config.h"
#include "text/tokenizer.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    kvsieve::fuzz::MemFile f(data, size);
    try {
        kvsieve::GGUFFile g(f.path());
        try {
            kvsieve::ModelConfig::from_gguf(g);
        } catch (const kvsieve::Error&) {}
        auto tok = kvsieve::Tokenizer::from_gguf(g);
        tok->encode("Hello world, 123 héllo", true, true);
    } catch (const kvsieve::Error&) {}
    return 0;
}
