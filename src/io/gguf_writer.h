#pragma once
// Writing GGUF version 3 files: metadata in insertion order, tensors aligned to general.alignment (32).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace kvsieve {

/// Collects metadata and tensors, then writes one GGUF v3 file. Tensor data is either copied from a
/// caller-owned buffer that must outlive write() (add_tensor_ref) or produced row by row by a callback
/// (add_tensor_gen), so multi-GB random models never sit in memory whole.
class GGUFWriter {
public:
    void set(const std::string& key, GGUFValue value);
    void set_string(const std::string& key, const std::string& v) { set(key, GGUFValue::make_string(v)); }
    void set_u32(const std::string& key, uint32_t v) { set(key, GGUFValue::make_u32(v)); }
    void set_f32(const std::string& key, float v) { set(key, GGUFValue::make_f32(v)); }
    void set_bool(const std::string& key, bool v) { set(key, GGUFValue::make_bool(v)); }

    /// Fills `out` (nbytes of the tensor) with the tensor's data.
    using Generator = std::function<void(uint8_t* out, uint64_t nbytes)>;

    /// Adds a tensor whose ne (fastest dimension first) and ggml type describe `data` of the right size.
    /// Throws Error if the byte count does not match the shape and type or the name is a duplicate.
    void add_tensor_ref(const std::string& name, uint32_t type, std::vector<int64_t> ne, const void* data,
                        uint64_t nbytes);
    /// Adds a tensor whose bytes are produced by gen(out, nbytes) at write time.
    void add_tensor_gen(const std::string& name, uint32_t type, std::vector<int64_t> ne, Generator gen);

    /// Writes the file (to path + ".tmp", then renamed) ; throws Error on I/O failure.
    void write(const std::string& path) const;

private:
    struct Entry {
        std::string name;
        uint32_t type;
        std::vector<int64_t> ne;
        uint64_t nbytes;
        const void* data;
        Generator gen;
    };
    std::vector<std::pair<std::string, GGUFValue>> kv_;
    std::vector<Entry> tensors_;
    uint64_t alignment_ = 32;
};

}  // namespace kvsieve
