#pragma once
// Run-time CPU feature detection for kernel dispatch.
#include <string>

namespace kvsieve {

/// Instruction-set features relevant to kvsieve's kernels, read once with CPUID (and XGETBV for OS support).
struct CpuFeatures {
    bool avx2 = false, fma = false, f16c = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512vnni = false;
    bool has_avx2_set() const { return avx2 && fma && f16c; }
    bool has_avx512_set() const { return has_avx2_set() && avx512f && avx512bw && avx512vl && avx512dq && avx512vnni; }
    /// e.g. "avx2 fma f16c avx512f ..."
    std::string str() const;
};

const CpuFeatures& cpu_features();

}  // namespace kvsieve
