#pragma once
// A sequence saved to a file and restored: its compressed KV cache (only the kept entries), token history, the
// policy's state and the model's identity, with a checksum.
#include <cstdint>
#include <string>
#include <vector>

#include "session/session.h"

namespace kvsieve {

/// What a cache file holds besides the cache record.
struct SavedSequence {
    std::string policy_spec;      ///< the policy the cache ran (the restoring cache must run it too)
    int64_t n_ctx = 0;            ///< the context the sequence was given
    std::vector<int32_t> tokens;  ///< every token given to the cache, in order
    std::string extra;            ///< the caller's bytes (e.g. the next token's logits and the sampler's state)
    std::string cache_record;     ///< KVCache::save's record
};

/// A 64-bit identity of a model: FNV-1a over its hyperparameters, every tensor's name, type and shape, and the
/// first 64 KiB of the token embedding's bytes (two files of the same shape with other weights differ).
uint64_t model_fingerprint(const LlamaModel& m);

/// Writes the session's sequence to `path` (util/atomic_file.h: a temporary file of mode 0600 created
/// exclusively in the same folder, flushed and renamed into place, so an existing file is never half-overwritten
/// and no planted link is followed): magic "KVSIEVE-SEQ", format version, model fingerprint and summary, policy
/// spec, context, tokens, `extra`, the cache record, and an FNV-1a 64 checksum of everything before it. Throws
/// Error if the file cannot be written, naming it `shown` when given (else `path`).
void save_sequence(const std::string& path, const LlamaModel& m, const Session& s, const std::string& extra,
                   const std::string& shown = "");
/// The bytes save_sequence writes for the session (the same layout, checksum included), for a caller that needs
/// their size before writing them (a server's quota) and then writes them with write_file_atomic (util/atomic_file.h).
std::string encode_sequence(const LlamaModel& m, const Session& s, const std::string& extra);

/// Reads a file written by save_sequence for model m. Throws Error, naming the file (`shown` when given, else
/// `path`), when it cannot be read, is not a kvsieve sequence file, has another format version, is truncated or
/// corrupted (checksum), or was saved with another model.
SavedSequence read_sequence(const std::string& path, const LlamaModel& m, const std::string& shown = "");

/// What a generating caller (the CLI's generate, the server) keeps in SavedSequence::extra: the logits of the next
/// token ([n_vocab], empty when the sequence ended and needs new text to go on) and the sampler's generator state.
struct GenerationState {
    std::vector<float> logits;
    std::string sampler_state;
};
std::string encode_generation_state(const GenerationState& g);
/// Throws Error when `extra` is not such a record or its logits are neither empty nor n_vocab long.
GenerationState decode_generation_state(const std::string& extra, int n_vocab);

/// Loads the saved cache record into `s`'s cache (built with the saved policy and at least the saved context)
/// and its token history into `s`. Throws Error as KVCache::load (a cache of other key / value element types than the
/// saved record's is refused, naming both pairs).
void restore_sequence(Session& s, const SavedSequence& saved);

}  // namespace kvsieve
