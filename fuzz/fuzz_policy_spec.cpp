// The KV policy spec parser ("NAME[:key=value,...][+SELECTION]", "A>B"): any text gives a policy or one Error.
#include "policy/policy.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string spec(reinterpret_cast<const char*>(data), size);
    if (spec.find("model=") != std::string::npos) return 0;  // learned presets read files: not this target's input
    try {
        kvsieve::Policy p = kvsieve::parse_policy(spec);
        kvsieve::check_policy_fits(p, 4096);
        p.describe();
    } catch (const kvsieve::Error&) {}
    return 0;
}
