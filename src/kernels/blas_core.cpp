#include "kernels/blas_core.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <strings.h>

extern "C" char* openblas_get_corename(void);

namespace kvsieve {

std::string blas_core_name() {
    const char* name = openblas_get_corename();
    return name ? std::string(name) : std::string();
}

const char* blas_core_to_request(const CpuFeatures& f, const std::string& current) {
    static const char* const kFallbacks[] = {"Prescott",   "Core2",       "Penryn",    "Dunnington", "Nehalem",
                                             "Atom",       "Sandybridge", "Katmai",    "Coppermine", "Northwood",
                                             "Banias",     "Opteron",     "Barcelona", "Bobcat",     "Bulldozer",
                                             "Piledriver", "Steamroller", "Excavator", "Nano"};
    bool weak = false;
    for (const char* n : kFallbacks) weak = weak || strcasecmp(current.c_str(), n) == 0;
    if (!weak) return nullptr;
    if (f.avx2 && f.fma && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) return "SkylakeX";
    if (f.avx2 && f.fma) return "Haswell";
    return nullptr;
}

void ensure_blas_core(char** argv) {
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
    const char* preload = std::getenv("LD_PRELOAD");
    if (preload != nullptr && std::strstr(preload, "vgpreload") != nullptr) return;  // under valgrind: keep its run
    const char* want = blas_core_to_request(cpu_features(), blas_core_name());
    if (want == nullptr) return;
    if (setenv("OPENBLAS_CORETYPE", want, 1) != 0) return;
    execv("/proc/self/exe", argv);  // returns only on failure: run on with the kernels already loaded
}

}  // namespace kvsieve
