#include "io/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/tensor_types.h"
#include "util/error.h"

namespace kvsieve {

void GGUFWriter::set(const std::string& key, GGUFValue value) {
    if (key == "general.alignment") alignment_ = static_cast<uint64_t>(value.as_int());
    for (auto& kv : kv_)
        if (kv.first == key) {
            kv.second = std::move(value);
            return;
        }
    kv_.emplace_back(key, std::move(value));
}

namespace {
uint64_t tensor_bytes(const std::string& name, uint32_t type, const std::vector<int64_t>& ne) {
    int64_t blck;
    size_t bb;
    if (!ggml_type_geometry(type, &blck, &bb)) fail("tensor '", name, "': unknown type ", type);
    require(!ne.empty() && ne.size() <= 4, "tensor '", name, "': 1 to 4 dimensions expected");
    uint64_t n = 1;
    for (int64_t d : ne) {
        require(d > 0, "tensor '", name, "': dimension ", d, " is not positive");
        n *= static_cast<uint64_t>(d);
    }
    require(ne[0] % blck == 0, "tensor '", name, "': row length ", ne[0], " not a multiple of block ", blck);
    return n / blck * bb;
}
}  // namespace

void GGUFWriter::add_tensor_ref(const std::string& name, uint32_t type, std::vector<int64_t> ne, const void* data,
                                uint64_t nbytes) {
    const uint64_t expect = tensor_bytes(name, type, ne);
    require(expect == nbytes, "tensor '", name, "': ", nbytes, " bytes given, shape and type need ", expect);
    for (const auto& t : tensors_) require(t.name != name, "duplicate tensor name '", name, "'");
    tensors_.push_back({name, type, std::move(ne), nbytes, data, nullptr});
}

void GGUFWriter::add_tensor_gen(const std::string& name, uint32_t type, std::vector<int64_t> ne, Generator gen) {
    const uint64_t nbytes = tensor_bytes(name, type, ne);
    for (const auto& t : tensors_) require(t.name != name, "duplicate tensor name '", name, "'");
    tensors_.push_back({name, type, std::move(ne), nbytes, nullptr, std::move(gen)});
}

namespace {
class Out {
public:
    explicit Out(const std::string& path) : path_(path) {
        f_ = std::fopen(path.c_str(), "wb");
        if (!f_) fail("cannot write '", path, "': ", std::strerror(errno));
    }
    ~Out() {
        if (f_) std::fclose(f_);
    }
    void bytes(const void* p, size_t n) {
        if (n && std::fwrite(p, 1, n, f_) != n) fail("write error on '", path_, "': ", std::strerror(errno));
        pos_ += n;
    }
    template <class T>
    void put(T v) {
        bytes(&v, sizeof v);
    }
    void str(const std::string& s) {
        put<uint64_t>(s.size());
        bytes(s.data(), s.size());
    }
    void pad(uint64_t align) {
        static const uint8_t zeros[256] = {};
        const uint64_t n = (align - pos_ % align) % align;
        bytes(zeros, n);
    }
    void close() {
        if (std::fclose(f_) != 0) {
            f_ = nullptr;
            fail("write error on '", path_, "'");
        }
        f_ = nullptr;
    }
    uint64_t pos() const { return pos_; }

private:
    std::string path_;
    FILE* f_ = nullptr;
    uint64_t pos_ = 0;
};

void write_value(Out& o, const GGUFValue& v) {
    switch (v.type) {
        case GGUFValueType::UINT8: o.put<uint8_t>(v.u); break;
        case GGUFValueType::INT8: o.put<int8_t>(v.i); break;
        case GGUFValueType::UINT16: o.put<uint16_t>(v.u); break;
        case GGUFValueType::INT16: o.put<int16_t>(v.i); break;
        case GGUFValueType::UINT32: o.put<uint32_t>(v.u); break;
        case GGUFValueType::INT32: o.put<int32_t>(v.i); break;
        case GGUFValueType::FLOAT32: o.put<float>(static_cast<float>(v.f)); break;
        case GGUFValueType::BOOL: o.put<uint8_t>(v.u ? 1 : 0); break;
        case GGUFValueType::STRING: o.str(v.s); break;
        case GGUFValueType::UINT64: o.put<uint64_t>(v.u); break;
        case GGUFValueType::INT64: o.put<int64_t>(v.i); break;
        case GGUFValueType::FLOAT64: o.put<double>(v.f); break;
        case GGUFValueType::ARRAY:
            o.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
            o.put<uint64_t>(v.array.size());
            for (const auto& e : v.array) write_value(o, e);
            break;
    }
}
}  // namespace

void GGUFWriter::write(const std::string& path) const {
    const std::string tmp = path + ".tmp";
    {
        Out o(tmp);
        o.bytes("GGUF", 4);
        o.put<uint32_t>(3);
        o.put<uint64_t>(tensors_.size());
        o.put<uint64_t>(kv_.size());
        for (const auto& [k, v] : kv_) {
            o.str(k);
            o.put<uint32_t>(static_cast<uint32_t>(v.type));
            write_value(o, v);
        }
        uint64_t off = 0;
        for (const auto& t : tensors_) {
            o.str(t.name);
            o.put<uint32_t>(t.ne.size());
            for (int64_t d : t.ne) o.put<uint64_t>(d);
            o.put<uint32_t>(t.type);
            o.put<uint64_t>(off);
            off += (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
        }
        o.pad(alignment_);
        std::vector<uint8_t> buf;
        for (const auto& t : tensors_) {
            if (t.data) {
                o.bytes(t.data, t.nbytes);
            } else {
                buf.resize(t.nbytes);
                t.gen(buf.data(), t.nbytes);
                o.bytes(buf.data(), t.nbytes);
            }
            o.pad(alignment_);
        }
        o.close();
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename '", tmp, "' to '", path, "'");
}

}  // namespace kvsieve
