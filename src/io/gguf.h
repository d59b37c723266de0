#pragma once
// GGUF files (versions 2 and 3, little-endian): metadata and tensor table, memory-mapped read-only.
// Format: "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv × (string key, u32 type, value);
// n_tensors × (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset); padding to
// general.alignment (default 32); tensor data, each offset relative to the data start and aligned.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kvsieve {

/// GGUF metadata value types (u32 on disk).
enum class GGUFValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

/// One metadata value. Scalars keep their on-disk type so a file can be rewritten unchanged; numbers are
/// available through as_int / as_float whatever their width. Arrays hold their elements in `array`.
struct GGUFValue {
    GGUFValueType type = GGUFValueType::UINT32;
    GGUFValueType elem_type = GGUFValueType::UINT32;  ///< element type when type == ARRAY
    uint64_t u = 0;                                   ///< unsigned integers and bool
    int64_t i = 0;                                    ///< signed integers
    double f = 0;                                     ///< floats
    std::string s;                                    ///< strings
    std::vector<GGUFValue> array;

    bool is_integer() const;
    bool is_float() const;
    /// Integer value (any integer width or bool); throws Error if not an integer.
    int64_t as_int() const;
    /// Numeric value as double (integers converted); throws Error if not a number.
    double as_float() const;

    static GGUFValue make_u32(uint32_t v);
    static GGUFValue make_i32(int32_t v);
    static GGUFValue make_f32(float v);
    static GGUFValue make_bool(bool v);
    static GGUFValue make_string(std::string v);
    static GGUFValue make_array(GGUFValueType elem, std::vector<GGUFValue> v);
};

/// Name of a metadata type ("uint32", "array"...).
std::string value_type_name(GGUFValueType t);

/// One entry of the tensor table. ne[0] is the fastest-varying dimension (row length for matrices).
struct GGUFTensorInfo {
    std::string name;
    uint32_t n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};
    uint32_t type = 0;              ///< ggml type id (see kernels/tensor_types.h)
    uint64_t offset = 0;            ///< bytes from the start of the data section
    uint64_t nbytes = 0;            ///< computed from ne and type
    const uint8_t* data = nullptr;  ///< points into the mapping

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    std::string shape_str() const;
};

/// A memory-mapped GGUF file. Construction validates the whole header: magic, version (2 or 3), every
/// string and array length against the file size, every tensor's type, dimensions, alignment, offset and
/// size against the data section, and duplicate names. Throws Error naming the first problem found.
class GGUFFile {
public:
    explicit GGUFFile(const std::string& path);
    ~GGUFFile();
    GGUFFile(const GGUFFile&) = delete;
    GGUFFile& operator=(const GGUFFile&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t file_size() const { return size_; }
    /// Drops the resident pages of the mapped bytes [p, p + n) that lie wholly inside the range (madvise
    /// MADV_DONTNEED on its page-aligned interior), for data a caller has copied elsewhere; read again, the pages
    /// fault back in from the file unchanged. Throws Error when the range is not inside the mapping.
    void release(const void* p, uint64_t n) const;

    /// Metadata in file order.
    const std::vector<std::pair<std::string, GGUFValue>>& metadata() const { return kv_; }
    /// nullptr when absent.
    const GGUFValue* find(const std::string& key) const;
    bool has(const std::string& key) const { return find(key) != nullptr; }

    /// Typed getters: throw Error if the key is missing (unless a default is given) or has the wrong type.
    std::string get_string(const std::string& key) const;
    std::string get_string(const std::string& key, const std::string& def) const;
    int64_t get_int(const std::string& key) const;
    int64_t get_int(const std::string& key, int64_t def) const;
    double get_float(const std::string& key, double def) const;
    bool get_bool(const std::string& key, bool def) const;
    std::vector<std::string> get_string_array(const std::string& key) const;
    std::vector<float> get_float_array(const std::string& key) const;
    std::vector<int32_t> get_int_array(const std::string& key) const;

    const std::vector<GGUFTensorInfo>& tensors() const { return tensors_; }
    /// nullptr when absent.
    const GGUFTensorInfo* find_tensor(const std::string& name) const;

private:
    std::string path_;
    int fd_ = -1;
    uint8_t* map_ = nullptr;
    uint64_t size_ = 0;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    std::vector<std::pair<std::string, GGUFValue>> kv_;
    std::map<std::string, size_t> kv_index_;
    std::vector<GGUFTensorInfo> tensors_;
    std::map<std::string, size_t> tensor_index_;
};

}  // namespace kvsieve
