#include "session/cache_file.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "util/atomic_file.h"
#include "util/binary_io.h"

namespace kvsieve {

namespace {
const char kMagic[12] = "KVSIEVE-SEQ";  // 11 characters and the terminating zero
constexpr uint32_t kVersion = 1;
}  // namespace

uint64_t model_fingerprint(const LlamaModel& m) {
    const std::string summary = m.config().summary();
    uint64_t h = fnv1a64(summary.data(), summary.size());
    for (const GGUFTensorInfo& t : m.file().tensors()) {
        h = fnv1a64(t.name.data(), t.name.size(), h);
        h = fnv1a64(&t.type, sizeof t.type, h);
        h = fnv1a64(t.ne, sizeof t.ne, h);
    }
    const WeightMatrix& e = m.weights().tok_embd;
    h = fnv1a64(e.data, std::min<size_t>(e.nbytes(), 65536), h);
    return h;
}

std::string encode_sequence(const LlamaModel& m, const Session& s, const std::string& extra) {
    BinaryWriter w;
    w.bytes(kMagic, sizeof kMagic);
    w.pod(kVersion);
    w.pod(model_fingerprint(m));
    w.str(m.config().summary());
    w.str(s.cache().policy().spec);
    w.pod<int64_t>(s.n_ctx());
    w.vec(s.tokens());
    w.str(extra);
    BinaryWriter cache;
    s.cache().save(cache);
    w.str(cache.data());
    const uint64_t sum = fnv1a64(w.data().data(), w.data().size());
    w.pod(sum);
    return w.data();
}

void save_sequence(const std::string& path, const LlamaModel& m, const Session& s, const std::string& extra,
                   const std::string& shown) {
    write_file_atomic(path, encode_sequence(m, s, extra), shown);
}

SavedSequence read_sequence(const std::string& path, const LlamaModel& m, const std::string& shown) {
    const std::string name = shown.empty() ? path : shown;
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot read the cache file '", name, "'");
    std::ostringstream ss;
    ss << f.rdbuf();
    const std::string data = ss.str();
    const std::string what = "cache file '" + name + "'";
    require(data.size() >= sizeof kMagic && data.compare(0, sizeof kMagic, std::string(kMagic, sizeof kMagic)) == 0,
            "'", name, "' is not a kvsieve cache file (no KVSIEVE-SEQ header)");
    require(data.size() >= sizeof kMagic + sizeof(uint32_t) + sizeof(uint64_t), what, " is truncated");
    BinaryReader r(data.data(), data.size() - sizeof(uint64_t), what);
    char magic[sizeof kMagic];
    r.bytes(magic, sizeof magic);
    const uint32_t version = r.pod<uint32_t>();
    require(version == kVersion, what, " has format version ", version, "; this build reads version ", kVersion);
    uint64_t sum = 0;
    std::memcpy(&sum, data.data() + data.size() - sizeof sum, sizeof sum);
    require(fnv1a64(data.data(), data.size() - sizeof sum) == sum, what,
            " is corrupted or truncated (its checksum does not match)");
    const uint64_t fp = r.pod<uint64_t>();
    const std::string summary = r.str(4096);
    require(fp == model_fingerprint(m), what, " was saved with another model (", summary, "); this is ",
            m.config().summary(), (summary == m.config().summary() ? " with other weights" : ""));
    SavedSequence s;
    s.policy_spec = r.str(1 << 16);
    s.n_ctx = r.pod<int64_t>();
    s.tokens = r.vec<int32_t>(1u << 24);
    s.extra = r.str(1u << 30);
    s.cache_record = r.str(1ull << 40);
    require(r.left() == 0, what, " is corrupted (", r.left(), " bytes after the cache record)");
    return s;
}

std::string encode_generation_state(const GenerationState& g) {
    BinaryWriter w;
    w.vec(g.logits);
    w.str(g.sampler_state);
    return w.data();
}

GenerationState decode_generation_state(const std::string& extra, int n_vocab) {
    BinaryReader r(extra.data(), extra.size(), "the saved generation state");
    GenerationState g;
    g.logits = r.vec<float>(static_cast<size_t>(n_vocab));
    g.sampler_state = r.str(1 << 16);
    require(g.logits.empty() || static_cast<int>(g.logits.size()) == n_vocab, "the saved generation state holds ",
            g.logits.size(), " logits; the model's vocabulary has ", n_vocab);
    return g;
}

void restore_sequence(Session& s, const SavedSequence& saved) {
    BinaryReader r(saved.cache_record.data(), saved.cache_record.size(), "the saved cache record");
    s.cache().load(r);
    require(s.cache().n_tokens() == static_cast<int64_t>(saved.tokens.size()), "the saved cache holds ",
            s.cache().n_tokens(), " positions but its history ", saved.tokens.size(), " tokens");
    s.restore_tokens(saved.tokens);
}

}  // namespace kvsieve
