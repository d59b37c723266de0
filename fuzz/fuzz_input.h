#pragma once
// Helpers shared by the fuzz targets: the input as a file (for readers that take a path) and the repository's paths.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvsieve::fuzz {

/// The fuzz input as an in-memory file (memfd), reachable by path while the object lives.
class MemFile {
public:
    MemFile(const uint8_t* data, size_t size) {
        fd_ = memfd_create("kvsieve-fuzz", 0);
        size_t done = 0;
        while (fd_ >= 0 && done < size) {
            const ssize_t n = ::write(fd_, data + done, size - done);
            if (n <= 0) break;
            done += static_cast<size_t>(n);
        }
        path_ = "/proc/self/fd/" + std::to_string(fd_);
    }
    ~MemFile() {
        if (fd_ >= 0) ::close(fd_);
    }
    const std::string& path() const { return path_; }

private:
    int fd_ = -1;
    std::string path_;
};

/// A file of the repository (KVSIEVE_SOURCE_DIR is set by fuzz/CMakeLists.txt).
inline std::string source_path(const std::string& rel) { return std::string(KVSIEVE_SOURCE_DIR) + "/" + rel; }

/// A tiny random-weight test model that configuring writes into the build tree (KVSIEVE_TEST_MODELS_DIR, set by
/// fuzz/CMakeLists.txt; tests/data/make_tiny_models.py): tiny-{llama,qwen2,qwen3}-f32.gguf.
inline std::string test_model_path(const std::string& name) {
    return std::string(KVSIEVE_TEST_MODELS_DIR) + "/" + name;
}

}  // namespace kvsieve::fuzz
