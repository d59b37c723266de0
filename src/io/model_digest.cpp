#include "io/model_digest.h"

#include <algorithm>
#include <cstring>

#include "io/gguf.h"
#include "util/sha256.h"

namespace kvsieve {

namespace {
constexpr uint64_t kWhole = 64 << 10, kEnd = 16 << 10, kSlice = 512, kSlices = 32;

template <class T>
void put(std::string& out, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // little-endian on every platform kvsieve builds for (x86-64)
    out.append(b, sizeof(T));
}
}  // namespace

std::string model_digest(const GGUFFile& f) {
    std::string buf;
    for (const GGUFTensorInfo& t : f.tensors()) {
        put<uint64_t>(buf, t.name.size());
        buf += t.name;
        put<uint32_t>(buf, t.type);
        for (int64_t n : t.ne) put<int64_t>(buf, n);
        const char* d = reinterpret_cast<const char*>(t.data);
        if (t.nbytes <= kWhole) {
            buf.append(d, t.nbytes);
            continue;
        }
        buf.append(d, kEnd);
        const uint64_t span = t.nbytes - 2 * kEnd - kSlice;
        for (uint64_t i = 0; i < kSlices; ++i) buf.append(d + kEnd + span * i / (kSlices - 1), kSlice);
        buf.append(d + t.nbytes - kEnd, kEnd);
    }
    return "sha256:" + sha256_hex(buf);
}

}  // namespace kvsieve
