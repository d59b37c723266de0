// Walsh–Hadamard transform: the scalar reference, argument checks and the run-time choice of instruction set.
#include "kernels/hadamard.h"

#include <cmath>
#include <string>

#include "kernels/cpu_features.h"
#include "kernels/dot.h"
#include "util/error.h"

namespace kvsieve {
namespace {

/// One row: stage h (h = 1, 2, …, d/2) pairs element j with j + h inside each block of 2h and replaces
/// (a, b) by (a + b, a − b); after log2(d) stages x holds √d·H_d·x, which the last loop scales by 1/√d.
void fwht_row_scalar(float* x, int d) {
    for (int h = 1; h < d; h *= 2) {
        for (int i = 0; i < d; i += 2 * h) {
            for (int j = i; j < i + h; ++j) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
    }
    const float s = hadamard_scale(d);
    for (int j = 0; j < d; ++j) x[j] *= s;
}

void rows_scalar(float* x, int64_t rows, int d, int64_t ld) {
    for (int64_t r = 0; r < rows; ++r) fwht_row_scalar(x + r * ld, d);
}

void check_dim(int d) {
    require(hadamard_supported(d), "Walsh-Hadamard transform: head dimension ", d,
            " is not a power of two between 1 and ", kHadamardMaxDim);
}

}  // namespace

float hadamard_scale(int d) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))); }

bool hadamard_supported(int d) { return d >= 1 && d <= kHadamardMaxDim && (d & (d - 1)) == 0; }

const HadamardKernels& hadamard_kernels_scalar() {
    static const HadamardKernels k = {.isa = "scalar", .rows = rows_scalar};
    return k;
}

const HadamardKernels& hadamard_kernels() {
    static const HadamardKernels* k = [] {
        const std::string isa = dot_kernels().isa;
        if (isa == "avx512") return &hadamard_kernels_avx512();
        if (isa == "avx2") return &hadamard_kernels_avx2();
        return &hadamard_kernels_scalar();
    }();
    return *k;
}

void fwht(float* x, int d) {
    check_dim(d);
    require(x != nullptr, "Walsh-Hadamard transform: null vector");
    hadamard_kernels().rows(x, 1, d, d);
}

void fwht_rows(float* x, int64_t rows, int d, int64_t ld) {
    check_dim(d);
    require(rows >= 0, "Walsh-Hadamard transform: negative row count ", rows);
    require(ld >= d, "Walsh-Hadamard transform: row stride ", ld, " is shorter than the head dimension ", d);
    if (rows == 0) return;
    require(x != nullptr, "Walsh-Hadamard transform: null rows");
    hadamard_kernels().rows(x, rows, d, ld);
}

}  // namespace kvsieve
