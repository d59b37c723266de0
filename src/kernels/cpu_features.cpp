#include "kernels/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <string>

#include "kernels/dot.h"
#include "util/error.h"

namespace kvsieve {

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = [] {
        CpuFeatures c;
        __builtin_cpu_init();
        c.avx2 = __builtin_cpu_supports("avx2");
        c.fma = __builtin_cpu_supports("fma");
        // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
        unsigned a = 0, b = 0, cx = 0, d = 0;
        c.f16c = __get_cpuid(1, &a, &b, &cx, &d) && (cx & bit_F16C) != 0;
        c.avx512f = __builtin_cpu_supports("avx512f");
        c.avx512bw = __builtin_cpu_supports("avx512bw");
        c.avx512vl = __builtin_cpu_supports("avx512vl");
        c.avx512dq = __builtin_cpu_supports("avx512dq");
        c.avx512vnni = __builtin_cpu_supports("avx512vnni");
        return c;
    }();
    return f;
}

std::string CpuFeatures::str() const {
    std::string s;
    auto add = [&](bool b, const char* n) {
        if (b) s += (s.empty() ? "" : " ") + std::string(n);
    };
    add(avx2, "avx2");
    add(fma, "fma");
    add(f16c, "f16c");
    add(avx512f, "avx512f");
    add(avx512bw, "avx512bw");
    add(avx512vl, "avx512vl");
    add(avx512dq, "avx512dq");
    add(avx512vnni, "avx512vnni");
    return s;
}

const DotKernels& dot_kernels() {
    static const DotKernels* k = [] {
        const CpuFeatures& c = cpu_features();
        const char* force = std::getenv("KVSIEVE_ISA");
        if (force && *force) {
            const std::string f = force;
            if (f == "scalar") return &dot_kernels_scalar();
            if (f == "avx2") {
                require(c.has_avx2_set(), "KVSIEVE_ISA=avx2 but this CPU lacks AVX2/FMA/F16C");
                return &dot_kernels_avx2();
            }
            if (f == "avx512") {
                require(c.has_avx512_set(), "KVSIEVE_ISA=avx512 but this CPU lacks AVX-512 F/BW/VL/DQ/VNNI");
                return &dot_kernels_avx512();
            }
            fail("KVSIEVE_ISA='", f, "' is not one of scalar, avx2, avx512");
        }
        if (c.has_avx512_set()) return &dot_kernels_avx512();
        if (c.has_avx2_set()) return &dot_kernels_avx2();
        return &dot_kernels_scalar();
    }();
    return *k;
}

}  // namespace kvsieve
