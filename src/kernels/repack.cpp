#include "kernels/repack.h"

#include <cstdlib>
#include <cstring>

#include "kernels/quant.h"
#include "util/error.h"

namespace kvsieve {

AlignedBuffer::AlignedBuffer(size_t n) : n_(n) {
    const size_t rounded = (n + 63) / 64 * 64;
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, rounded ? rounded : 64));
    if (!p) throw std::bad_alloc();
    p_.reset(p);
}
void AlignedBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

WeightMatrix repack_q8_0_split(const WeightMatrix& src, AlignedBuffer& buf) {
    require(src.type == TensorType::Q8_0 && src.layout == RowLayout::kGGUF, "repack: ", src.name,
            " is not a GGUF-layout Q8_0 matrix");
    WeightMatrix dst = src;
    dst.layout = RowLayout::kSplitQ8;
    dst.row_bytes = split_q8_row_bytes(src.cols);
    buf = AlignedBuffer(dst.row_bytes * static_cast<size_t>(src.rows));
    dst.data = buf.data();
    const int64_t nb = src.cols / QK8_0;
    uint8_t* out = buf.data();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < src.rows; ++r) {
        const auto* b = reinterpret_cast<const BlockQ8_0*>(src.row(r));
        uint8_t* q = out + static_cast<size_t>(r) * dst.row_bytes;
        auto* d = reinterpret_cast<uint16_t*>(q + src.cols);
        for (int64_t i = 0; i < nb; ++i) {
            std::memcpy(q + i * QK8_0, b[i].qs, QK8_0);
            d[i] = b[i].d;
        }
        const size_t used = static_cast<size_t>(nb) * (QK8_0 + 2);
        std::memset(q + used, 0, dst.row_bytes - used);
    }
    return dst;
}

}  // namespace kvsieve
