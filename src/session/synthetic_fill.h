#pragma once
// Synthetic KV entries for benchmarks of decode at a depth, where the values do not matter.
#include <cstdint>

#include "cache/kv_cache.h"

namespace kvsieve {

/// Appends n synthetic entries to every (layer, KV head) of `cache` at positions cache.n_tokens() … + n − 1, as if
/// n tokens had been processed: keys and values uniform in [−√3, √3) (unit variance) from a splitmix64 stream seeded
/// by `seed`, drawn token by token, layer by layer, head by head, keys and values interleaved per channel; each
/// entry with score 0 through the cache's admission path (KVCache::append), each token closed as a prefill step
/// (KVCache::finish_step). Throws Error if the context cannot hold n more positions; KVPoolExhausted like append
/// (the tokens before the failing one stay).
void fill_synthetic(KVCache& cache, int64_t n, uint64_t seed);

}  // namespace kvsieve
