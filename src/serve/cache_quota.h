#pragma once
// The byte quota of an owner's saved sequences in the server's --cache-dir (--cache-dir-quota-mb): each API key's
// folder (the folder itself on a server without keys) may hold at most that many bytes of .kvseq files.
#include <cstdint>
#include <string>

namespace kvsieve {

/// Bytes of the saved sequences directly in `folder`: regular files whose name ends in ".kvseq" (symbolic links
/// and subfolders — other owners' folders — are not counted or followed), leaving out the file named `except`.
/// A missing folder holds 0 bytes.
uint64_t saved_sequence_bytes(const std::string& folder, const std::string& except = "");

/// Refuses a save of `bytes` bytes to `path` that would take the saved sequences of its folder past `quota_bytes`
/// (0: no quota): throws StatusError 403 (serve/scheduler.h) saying how much is saved, how much the save needs and
/// the quota, without naming the server's folders. A file already at `path` counts as freed (the save replaces it),
/// so that saving over a name never needs more than the difference; deleting saved files frees their bytes.
void check_cache_quota(const std::string& path, uint64_t bytes, uint64_t quota_bytes);

}  // namespace kvsieve
