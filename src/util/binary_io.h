#pragma once
// Little-endian binary records in memory: a writer that appends fields and a bounds-checked reader, for files
// kvsieve writes and reads back (saved KV caches).
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "util/error.h"

namespace kvsieve {

/// FNV-1a, 64 bits (Fowler–Noll–Vo; offset basis 14695981039346656037, prime 1099511628211), continuing from h.
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 14695981039346656037ull);

/// Appends fields to a byte string (host byte order: x86-64, little-endian).
class BinaryWriter {
public:
    template <class T>
    void pod(const T& x) {
        static_assert(std::is_trivially_copyable_v<T>);
        bytes(&x, sizeof x);
    }
    void bytes(const void* p, size_t n) {
        if (n > 0) buf_.append(static_cast<const char*>(p), n);
    }
    void str(const std::string& s) {
        pod<uint64_t>(s.size());
        bytes(s.data(), s.size());
    }
    template <class T>
    void vec(const std::vector<T>& v) {
        static_assert(std::is_trivially_copyable_v<T>);
        pod<uint64_t>(v.size());
        bytes(v.data(), v.size() * sizeof(T));
    }
    const std::string& data() const { return buf_; }

private:
    std::string buf_;
};

/// Reads fields back; every read is checked against the end, and a count larger than `max` elements is refused,
/// so a truncated or corrupted record is one Error naming `what` ("… is truncated" / "… is corrupted").
class BinaryReader {
public:
    BinaryReader(const char* data, size_t n, std::string what) : p_(data), end_(data + n), what_(std::move(what)) {}
    template <class T>
    T pod() {
        static_assert(std::is_trivially_copyable_v<T>);
        T x;
        bytes(&x, sizeof x);
        return x;
    }
    void bytes(void* dst, size_t n) {
        if (static_cast<size_t>(end_ - p_) < n) fail(what_, " is truncated");
        if (n == 0) return;  // an empty vector's data() may be null
        std::memcpy(dst, p_, n);
        p_ += n;
    }
    std::string str(size_t max = 1 << 20) {
        const uint64_t n = count(max, 1);
        std::string s(n, '\0');
        bytes(s.data(), n);
        return s;
    }
    template <class T>
    std::vector<T> vec(size_t max) {
        const uint64_t n = count(max, sizeof(T));
        std::vector<T> v(n);
        bytes(v.data(), n * sizeof(T));
        return v;
    }
    /// A length field, at most max; with elem_bytes > 0 also at most what is left to read (so that a corrupted
    /// length is an error, not a huge allocation).
    uint64_t count(size_t max, size_t elem_bytes = 0) {
        const uint64_t n = pod<uint64_t>();
        if (n > max) fail(what_, " is corrupted (a length of ", n, " where at most ", max, " fits)");
        if (elem_bytes > 0 && n > left() / elem_bytes) fail(what_, " is truncated");
        return n;
    }
    size_t left() const { return static_cast<size_t>(end_ - p_); }
    const std::string& what() const { return what_; }

private:
    const char* p_;
    const char* end_;
    std::string what_;
};

}  // namespace kvsieve
