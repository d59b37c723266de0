#pragma once
// Helpers that rewrite a GGUF file with changes, to produce malformed or altered models for tests.
#include <functional>
#include <stdexcept>
#include <string>

#include "io/gguf.h"
#include "io/gguf_writer.h"

namespace kvsieve::test {

/// Copies `src` to `dst` through GGUFWriter. `edit_kv(key, value)` returns false to drop an entry;
/// `keep_tensor(name)` returns false to drop a tensor; `retype` may change a tensor's (type, ne) — the
/// data is then zero bytes of the new size; `shrink` may give an F32 tensor a shape of no more elements (ne, ggml
/// order) — its data is then the first elements of the original (the first rows, for a smaller ne[1]).
struct GGUFEdit {
    std::function<bool(const std::string&, GGUFValue&)> edit_kv = [](const std::string&, GGUFValue&) { return true; };
    std::function<bool(const std::string&)> keep_tensor = [](const std::string&) { return true; };
    std::function<bool(const std::string&, uint32_t&, std::vector<int64_t>&)> retype =
        [](const std::string&, uint32_t&, std::vector<int64_t>&) { return false; };
    std::function<bool(const std::string&, std::vector<int64_t>&)> shrink = [](const std::string&,
                                                                               std::vector<int64_t>&) { return false; };
};

inline void rewrite_gguf(const std::string& src, const std::string& dst, const GGUFEdit& e) {
    GGUFFile f(src);
    GGUFWriter w;
    for (auto [k, v] : f.metadata())
        if (e.edit_kv(k, v)) w.set(k, v);
    for (const auto& t : f.tensors()) {
        if (!e.keep_tensor(t.name)) continue;
        uint32_t type = t.type;
        std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
        if (e.shrink(t.name, ne)) {
            uint64_t n = 1;
            for (int64_t x : ne) n *= static_cast<uint64_t>(x);
            if (t.type != 0 || n * sizeof(float) > t.nbytes)  // 0: GGML_TYPE_F32
                throw std::runtime_error("rewrite_gguf: cannot shrink tensor " + t.name);
            w.add_tensor_ref(t.name, t.type, ne, t.data, n * sizeof(float));
        } else if (e.retype(t.name, type, ne)) {
            w.add_tensor_gen(t.name, type, ne, [](uint8_t* out, uint64_t n) { std::fill_n(out, n, 0); });
        } else {
            w.add_tensor_ref(t.name, t.type, ne, t.data, t.nbytes);
        }
    }
    w.write(dst);
}

}  // namespace kvsieve::test
