#pragma once
// Files written whole or not at all, safe in a folder others can write to.
#include <string>
#include <string_view>

#include "util/error.h"

namespace kvsieve {

/// write_file_atomic's error when the storage is full: no space left on the device (ENOSPC), the user's disk quota
/// reached (EDQUOT), or the file size limit of the process (EFBIG, RLIMIT_FSIZE). A server answers it 507.
class StorageFull : public Error {
public:
    explicit StorageFull(const std::string& msg) : Error(msg) {}
};

/// Writes `data` to `path` so that `path` is either its old file or the whole new one, even after a crash: the
/// bytes go to a new temporary file in the same folder (".<name>.XXXXXX.tmp", created exclusively with mode 0600:
/// a file or symbolic link already at that name is never opened or followed), which is flushed to disk (fsync),
/// renamed over `path` (a symbolic link at `path` is replaced, not followed), and the folder is flushed too.
/// Throws Error "cannot write '<shown>': <reason>" on any failure (the temporary is removed), StorageFull when the
/// reason is a full disk, a quota or a file size limit; <shown> is `shown` when given (so that a server's messages
/// need not reveal its folders), else `path`.
void write_file_atomic(const std::string& path, std::string_view data, const std::string& shown = "");

/// Removes the temporaries write_file_atomic leaves when the process dies between creating and renaming one
/// (".<name>.XXXXXX.tmp", and "<name>.tmp" of earlier versions), in `dir` and in its immediate subfolders; links
/// are removed themselves, never followed. Returns how many it removed; a missing folder removes none.
int remove_stale_temporaries(const std::string& dir);

}  // namespace kvsieve
