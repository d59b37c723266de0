#pragma once
// OpenBLAS's kernel choice. A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels from the CPU model when it loads;
// a model it does not know (e.g. a virtual machine's "Intel Xeon Processor" with AVX-512, seen with OpenBLAS
// 0.3.21) falls back to its SSE3 "Prescott" kernels, measured 4.6× slower than its SkylakeX kernels in SGEMM on
// one core of such a machine (15 vs 69 GFLOPS, 1024³). The choice is made before main() and read from the
// environment variable OPENBLAS_CORETYPE, so the fix is to set it and start the program again.
#include <string>

#include "kernels/cpu_features.h"

namespace kvsieve {

/// The kernel set OpenBLAS loaded ("Prescott", "Haswell", "SkylakeX", ...); "" when the library does not say.
std::string blas_core_name();

/// The OpenBLAS core to request instead of `current` on a CPU with features `f`: "SkylakeX" (AVX-512 F/BW/VL/DQ)
/// or "Haswell" (AVX2 + FMA) when `current` is one of the pre-AVX2 fallbacks (Prescott, Core2, Penryn, Dunnington,
/// Nehalem, Atom, Sandybridge, Katmai, Coppermine, Northwood, Banias, Opteron, Barcelona, Bobcat, Bulldozer,
/// Piledriver, Steamroller, Excavator, Nano) and the CPU can run better ones; nullptr when `current` is fine or
/// unknown. Pure: the decision only.
const char* blas_core_to_request(const CpuFeatures& f, const std::string& current);

/// Called first in main(): if OPENBLAS_CORETYPE is unset and blas_core_to_request() names a better core, sets the
/// variable and replaces the process with the same program and arguments (/proc/self/exe), so OpenBLAS loads
/// that core. Does nothing when the variable is set (by the user, or by the restart itself: no loop) or when exec
/// fails (the program then runs on, slower) or under valgrind
/// (whose exec would leave the tool). Must run before any thread is started.
void ensure_blas_core(char** argv);

}  // namespace kvsieve
