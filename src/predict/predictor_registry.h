#pragma once
// One process-wide store of the learned methods' artifacts (a KVzap surrogate, WG-KV gates, a KVpop scorer, SP-KV
// gates): each is loaded once per file and shared, read-only, by every policy and sequence that uses it. An artifact
// is keyed by its kind, the canonical path of its file or directory, and a variant (the model shape it was loaded
// for); a change of the files' size or modification time (the stamp) loads it again on the next request.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace kvsieve {

/// What identifies the contents of an artifact on disk: its canonical path and, for a file, its size and
/// modification time, or for a directory those of every regular file directly inside it.
struct ArtifactStamp {
    std::string path;   ///< canonical path
    std::string stamp;  ///< sizes and modification times, as text
    bool operator==(const ArtifactStamp& o) const { return path == o.path && stamp == o.stamp; }
};

/// The stamp of the file or directory `path`. Throws Error when it does not exist.
ArtifactStamp artifact_stamp(const std::string& path);

/// The shared artifacts of this process.
class PredictorRegistry {
public:
    /// The one registry of the process.
    static PredictorRegistry& instance();

    /// The artifact of kind `kind` (e.g. "kvzap") at `path` for `variant` (e.g. "L=30,Hkv=3,d=64"; "" when it
    /// does not depend on the model), loaded by `load(path)` the first time and whenever the stamp changed since, else
    /// the one loaded before. A path that does not exist is passed to `load` as it is (its error names the problem)
    /// and nothing is kept. Errors of `load` propagate; nothing is kept then. Thread-safe.
    template <class T>
    std::shared_ptr<const T> get(const std::string& kind, const std::string& path, const std::string& variant,
                                 const std::function<T(const std::string&)>& load) {
        return std::static_pointer_cast<const T>(get_erased(kind, path, variant, [&](const std::string& p) {
            return std::static_pointer_cast<const void>(std::make_shared<const T>(load(p)));
        }));
    }

    /// Loads performed so far (every call of a `load` function that returned).
    uint64_t loads() const;
    /// Artifacts held.
    size_t size() const;
    /// Forgets every artifact (the policies holding one keep theirs).
    void clear();

private:
    std::shared_ptr<const void> get_erased(const std::string& kind, const std::string& path, const std::string& variant,
                                           const std::function<std::shared_ptr<const void>(const std::string&)>& load);

    struct Entry {
        ArtifactStamp stamp;
        std::shared_ptr<const void> value;
    };
    mutable std::mutex mu_;
    std::map<std::string, Entry> entries_;
    uint64_t loads_ = 0;
};

}  // namespace kvsieve
