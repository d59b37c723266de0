// full: the uncompressed cache; every entry is kept.
//   full[:sinks=S]   S > 0 keeps the first S entries in the sink region: still every entry is kept, but a read-time
//                    selection reads the sinks at every step besides what it chooses ("full:sinks=4+quest:budget=512")
#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

void register_full() {
    register_preset({"full", "no compression (reference)", [](PolicyParams& p) {
                         Policy pol;
                         const int64_t s = p.get_int("sinks", 0);
                         require(s >= 0, "policy full: sinks must be ≥ 0");
                         pol.sinks = static_cast<int>(s);
                         return pol;
                     }});
}

}  // namespace kvsieve
