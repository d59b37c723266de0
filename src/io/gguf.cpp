#include "io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kernels/tensor_types.h"
#include "util/error.h"

namespace kvsieve {

bool GGUFValue::is_integer() const {
    switch (type) {
        case GGUFValueType::UINT8:
        case GGUFValueType::INT8:
        case GGUFValueType::UINT16:
        case GGUFValueType::INT16:
        case GGUFValueType::UINT32:
        case GGUFValueType::INT32:
        case GGUFValueType::UINT64:
        case GGUFValueType::INT64:
        case GGUFValueType::BOOL: return true;
        default: return false;
    }
}
bool GGUFValue::is_float() const { return type == GGUFValueType::FLOAT32 || type == GGUFValueType::FLOAT64; }

int64_t GGUFValue::as_int() const {
    switch (type) {
        case GGUFValueType::INT8:
        case GGUFValueType::INT16:
        case GGUFValueType::INT32:
        case GGUFValueType::INT64: return i;
        case GGUFValueType::UINT8:
        case GGUFValueType::UINT16:
        case GGUFValueType::UINT32:
        case GGUFValueType::UINT64:
        case GGUFValueType::BOOL: return static_cast<int64_t>(u);
        default: fail("metadata value of type ", value_type_name(type), " is not an integer");
    }
}
double GGUFValue::as_float() const {
    if (is_float()) return f;
    if (is_integer()) return static_cast<double>(as_int());
    fail("metadata value of type ", value_type_name(type), " is not a number");
}

GGUFValue GGUFValue::make_u32(uint32_t v) {
    GGUFValue x;
    x.type = GGUFValueType::UINT32;
    x.u = v;
    return x;
}
GGUFValue GGUFValue::make_i32(int32_t v) {
    GGUFValue x;
    x.type = GGUFValueType::INT32;
    x.i = v;
    return x;
}
GGUFValue GGUFValue::make_f32(float v) {
    GGUFValue x;
    x.type = GGUFValueType::FLOAT32;
    x.f = v;
    return x;
}
GGUFValue GGUFValue::make_bool(bool v) {
    GGUFValue x;
    x.type = GGUFValueType::BOOL;
    x.u = v;
    return x;
}
GGUFValue GGUFValue::make_string(std::string v) {
    GGUFValue x;
    x.type = GGUFValueType::STRING;
    x.s = std::move(v);
    return x;
}
GGUFValue GGUFValue::make_array(GGUFValueType elem, std::vector<GGUFValue> v) {
    GGUFValue x;
    x.type = GGUFValueType::ARRAY;
    x.elem_type = elem;
    x.array = std::move(v);
    return x;
}

std::string value_type_name(GGUFValueType t) {
    static const char* names[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                  "bool",  "string", "array",  "uint64", "int64",  "float64"};
    const auto i = static_cast<uint32_t>(t);
    return i < 13 ? names[i] : cat("type ", i);
}

std::string GGUFTensorInfo::shape_str() const {
    std::string s = "[";
    for (uint32_t d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
    return s + "]";
}

namespace {

/// Bounds-checked little-endian reader over the mapped header.
class Reader {
public:
    Reader(const uint8_t* p, uint64_t n, const std::string& path) : p_(p), n_(n), path_(path) {}
    uint64_t pos() const { return pos_; }

    void need(uint64_t k, const char* what) {
        if (k > n_ - pos_)
            fail(path_, ": truncated GGUF file: ", what, " at byte ", pos_, " needs ", k, " bytes but the file has ",
                 n_ - pos_, " left");
    }
    template <class T>
    T get(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, p_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    std::string str(const char* what) {
        const uint64_t len = get<uint64_t>(what);
        need(len, what);
        std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
        pos_ += len;
        return s;
    }

    GGUFValue value(GGUFValueType t, const std::string& key, int depth = 0) {
        GGUFValue v;
        v.type = t;
        switch (t) {
            case GGUFValueType::UINT8: v.u = get<uint8_t>("value"); break;
            case GGUFValueType::INT8: v.i = get<int8_t>("value"); break;
            case GGUFValueType::UINT16: v.u = get<uint16_t>("value"); break;
            case GGUFValueType::INT16: v.i = get<int16_t>("value"); break;
            case GGUFValueType::UINT32: v.u = get<uint32_t>("value"); break;
            case GGUFValueType::INT32: v.i = get<int32_t>("value"); break;
            case GGUFValueType::FLOAT32: v.f = get<float>("value"); break;
            case GGUFValueType::BOOL: {
                const uint8_t b = get<uint8_t>("value");
                if (b > 1) fail(path_, ": metadata '", key, "': bool value ", int(b), " is neither 0 nor 1");
                v.u = b;
                break;
            }
            case GGUFValueType::STRING: v.s = str("string value"); break;
            case GGUFValueType::UINT64: v.u = get<uint64_t>("value"); break;
            case GGUFValueType::INT64: v.i = get<int64_t>("value"); break;
            case GGUFValueType::FLOAT64: v.f = get<double>("value"); break;
            case GGUFValueType::ARRAY: {
                if (depth > 0) fail(path_, ": metadata '", key, "': nested arrays are not supported");
                const uint32_t et = get<uint32_t>("array type");
                if (et > 12) fail(path_, ": metadata '", key, "': unknown array element type ", et);
                v.elem_type = static_cast<GGUFValueType>(et);
                const uint64_t count = get<uint64_t>("array length");
                // Each element takes at least one byte (strings: 8), so a count beyond the file is corrupt.
                if (count > n_ - pos_)
                    fail(path_, ": metadata '", key, "': array of ", count, " elements exceeds the file size");
                v.array.reserve(count);
                for (uint64_t k = 0; k < count; ++k) v.array.push_back(value(v.elem_type, key, depth + 1));
                break;
            }
            default: fail(path_, ": metadata '", key, "': unknown value type ", static_cast<uint32_t>(t));
        }
        return v;
    }

private:
    const uint8_t* p_;
    uint64_t n_;
    uint64_t pos_ = 0;
    const std::string& path_;
};

}  // namespace

void GGUFFile::release(const void* p, uint64_t n) const {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    require(b >= map_ && n <= size_ && static_cast<uint64_t>(b - map_) <= size_ - n, path_,
            ": release of bytes outside the mapping");
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t lo = (reinterpret_cast<uintptr_t>(b) + page - 1) & ~(page - 1);
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(b) + n) & ~(page - 1);
    if (hi > lo)
        madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);  // advice only: a failure changes nothing
}

// One function on purpose (longer than ~80 lines): the GGUF header, metadata and tensor table are read in file
// order, each field checked against the bytes left before it is trusted, which a reader follows best top to bottom.
GGUFFile::GGUFFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY);
    if (fd_ < 0) fail("cannot open '", path, "': ", std::strerror(errno));
    struct stat st {};
    if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd_);
        fail("'", path, "' is not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ < 24) {
        ::close(fd_);
        fail(path, ": not a GGUF file (", size_, " bytes, too short for the header)");
    }
    void* m = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (m == MAP_FAILED) {
        ::close(fd_);
        fail("cannot map '", path, "': ", std::strerror(errno));
    }
    map_ = static_cast<uint8_t*>(m);

    try {
        Reader r(map_, size_, path_);
        if (std::memcmp(map_, "GGUF", 4) != 0) fail(path, ": not a GGUF file (bad magic)");
        r.get<uint32_t>("magic");
        version_ = r.get<uint32_t>("version");
        if (version_ != 2 && version_ != 3)
            fail(path, ": unsupported GGUF version ", version_, " (kvsieve reads versions 2 and 3)");
        const uint64_t n_tensors = r.get<uint64_t>("tensor count");
        const uint64_t n_kv = r.get<uint64_t>("metadata count");
        if (n_tensors > size_ / 8 || n_kv > size_ / 8)
            fail(path, ": truncated or corrupt GGUF file: the header declares ", n_tensors, " tensors and ", n_kv,
                 " metadata entries, more than ", size_, " bytes can hold");

        for (uint64_t k = 0; k < n_kv; ++k) {
            std::string key = r.str("metadata key");
            const uint32_t t = r.get<uint32_t>("metadata type");
            if (t > 12) fail(path, ": metadata '", key, "' has unknown value type ", t);
            GGUFValue v = r.value(static_cast<GGUFValueType>(t), key);
            if (kv_index_.count(key)) fail(path, ": duplicate metadata key '", key, "'");
            kv_index_[key] = kv_.size();
            kv_.emplace_back(std::move(key), std::move(v));
        }
        if (const GGUFValue* a = find("general.alignment")) {
            if (!a->is_integer()) fail(path, ": general.alignment is not an integer");
            const int64_t al = a->as_int();
            if (al <= 0 || (al & (al - 1)) != 0) fail(path, ": general.alignment ", al, " is not a power of two");
            alignment_ = static_cast<uint64_t>(al);
        }

        for (uint64_t k = 0; k < n_tensors; ++k) {
            GGUFTensorInfo ti;
            ti.name = r.str("tensor name");
            ti.n_dims = r.get<uint32_t>("tensor dimension count");
            if (ti.n_dims == 0 || ti.n_dims > 4)
                fail(path, ": tensor '", ti.name, "' has ", ti.n_dims, " dimensions (1 to 4 allowed)");
            for (uint32_t d = 0; d < ti.n_dims; ++d) {
                const uint64_t ne = r.get<uint64_t>("tensor dimension");
                if (ne == 0 || ne > (1ull << 40)) fail(path, ": tensor '", ti.name, "' has dimension ", d, " = ", ne);
                ti.ne[d] = static_cast<int64_t>(ne);
            }
            ti.type = r.get<uint32_t>("tensor type");
            ti.offset = r.get<uint64_t>("tensor offset");
            int64_t blck;
            size_t bbytes;
            if (!ggml_type_geometry(ti.type, &blck, &bbytes))
                fail(path, ": tensor '", ti.name, "' has unknown tensor type ", ti.type);
            if (ti.ne[0] % blck != 0)
                fail(path, ": tensor '", ti.name, "' row length ", ti.ne[0], " is not a multiple of the ",
                     type_name(ti.type), " block size ", blck);
            // The element count, checked as it is multiplied (each dimension alone may be up to 2^40).
            uint64_t n_el = 1;
            for (int d = 0; d < 4; ++d)
                if (__builtin_mul_overflow(n_el, static_cast<uint64_t>(ti.ne[d]), &n_el) || n_el > (1ull << 50))
                    fail(path, ": tensor '", ti.name, "' is too large (", ti.shape_str(), ")");
            ti.nbytes = n_el / blck * bbytes;
            if (ti.offset % alignment_ != 0)
                fail(path, ": tensor '", ti.name, "' offset ", ti.offset, " is not aligned to ", alignment_);
            if (tensor_index_.count(ti.name)) fail(path, ": duplicate tensor name '", ti.name, "'");
            tensor_index_[ti.name] = tensors_.size();
            tensors_.push_back(std::move(ti));
        }

        const uint64_t data_start = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
        if (n_tensors > 0 && data_start > size_)
            fail(path, ": truncated GGUF file: tensor data would start at byte ", data_start, " of ", size_);
        const uint64_t data_size = size_ - std::min(size_, data_start);
        for (auto& ti : tensors_) {
            if (ti.offset > data_size || ti.nbytes > data_size - ti.offset)
                fail(path, ": truncated or corrupt GGUF file: tensor '", ti.name, "' (", type_name(ti.type), " ",
                     ti.shape_str(), ", ", ti.nbytes, " bytes at data offset ", ti.offset,
                     ") extends beyond the end of the file (data section is ", data_size, " bytes)");
            ti.data = map_ + data_start + ti.offset;
        }
    } catch (...) {
        munmap(map_, size_);
        ::close(fd_);
        throw;
    }
}

GGUFFile::~GGUFFile() {
    if (map_) munmap(map_, size_);
    if (fd_ >= 0) ::close(fd_);
}

const GGUFValue* GGUFFile::find(const std::string& key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GGUFTensorInfo* GGUFFile::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string GGUFFile::get_string(const std::string& key) const {
    const GGUFValue* v = find(key);
    if (!v) fail(path_, ": missing metadata key '", key, "'");
    if (v->type != GGUFValueType::STRING) fail(path_, ": metadata '", key, "' is not a string");
    return v->s;
}
std::string GGUFFile::get_string(const std::string& key, const std::string& def) const {
    return has(key) ? get_string(key) : def;
}
int64_t GGUFFile::get_int(const std::string& key) const {
    const GGUFValue* v = find(key);
    if (!v) fail(path_, ": missing metadata key '", key, "'");
    if (!v->is_integer()) fail(path_, ": metadata '", key, "' is not an integer");
    return v->as_int();
}
int64_t GGUFFile::get_int(const std::string& key, int64_t def) const { return has(key) ? get_int(key) : def; }
double GGUFFile::get_float(const std::string& key, double def) const {
    const GGUFValue* v = find(key);
    if (!v) return def;
    if (!v->is_float() && !v->is_integer()) fail(path_, ": metadata '", key, "' is not a number");
    return v->as_float();
}
bool GGUFFile::get_bool(const std::string& key, bool def) const {
    const GGUFValue* v = find(key);
    if (!v) return def;
    if (!v->is_integer()) fail(path_, ": metadata '", key, "' is not a bool");
    return v->as_int() != 0;
}

namespace {
const GGUFValue& array_of(const GGUFFile& f, const std::string& key) {
    const GGUFValue* v = f.find(key);
    if (!v) fail(f.path(), ": missing metadata key '", key, "'");
    if (v->type != GGUFValueType::ARRAY) fail(f.path(), ": metadata '", key, "' is not an array");
    return *v;
}
}  // namespace

std::vector<std::string> GGUFFile::get_string_array(const std::string& key) const {
    const GGUFValue& a = array_of(*this, key);
    if (a.elem_type != GGUFValueType::STRING) fail(path_, ": metadata '", key, "' is not an array of strings");
    std::vector<std::string> out;
    out.reserve(a.array.size());
    for (const auto& e : a.array) out.push_back(e.s);
    return out;
}
std::vector<float> GGUFFile::get_float_array(const std::string& key) const {
    const GGUFValue& a = array_of(*this, key);
    std::vector<float> out;
    out.reserve(a.array.size());
    for (const auto& e : a.array) {
        if (!e.is_float() && !e.is_integer()) fail(path_, ": metadata '", key, "' is not a numeric array");
        out.push_back(static_cast<float>(e.as_float()));
    }
    return out;
}
std::vector<int32_t> GGUFFile::get_int_array(const std::string& key) const {
    const GGUFValue& a = array_of(*this, key);
    std::vector<int32_t> out;
    out.reserve(a.array.size());
    for (const auto& e : a.array) {
        if (!e.is_integer()) fail(path_, ": metadata '", key, "' is not an integer array");
        out.push_back(static_cast<int32_t>(e.as_int()));
    }
    return out;
}

}  // namespace kvsieve
