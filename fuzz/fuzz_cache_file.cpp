// Saved sequences: any bytes (with a valid checksum appended) read as a cache file of the tiny model and restored give a sequence or one Error.
#include <memory>

#include "cache/kv_cache.h"
#include "fuzz_input.h"
#include "model/llama_model.h"
#include "session/cache_file.h"
#include "session/session.h"
#include "text/tokenizer.h"
#include "util/binary_io.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const kvsieve::LlamaModel model(kvsieve::fuzz::source_path("tests/data/models/stories260K.gguf"));
    static const auto tok = kvsieve::Tokenizer::from_gguf(model.file());
    // The input is the file without its checksum, which is appended here, so that the fuzzer reaches the records.
    std::string bytes(reinterpret_cast<const char*>(data), size);
    const uint64_t sum = kvsieve::fnv1a64(bytes.data(), bytes.size());
    bytes.append(reinterpret_cast<const char*>(&sum), sizeof sum);
    kvsieve::fuzz::MemFile f(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    try {
        const kvsieve::SavedSequence s = kvsieve::read_sequence(f.path(), model);
        kvsieve::KVCache cache(
            model.config(), std::max<int64_t>(s.n_ctx, 1), kvsieve::parse_policy(s.policy_spec),
            std::make_shared<kvsieve::KVPool>(model.config().head_dim, kvsieve::KVType::kF16, 16, 64u << 20));
        kvsieve::Session session(model, *tok, cache);
        kvsieve::restore_sequence(session, s);
    } catch (const kvsieve::Error&) {}
    return 0;
}
