// full: the uncompressed cache; every entry is kept.
//   full[:sinks=S]   S > 0 keeps the first S entries in the sink region: still every entry is kept, but a read-time
//                    selection reads the sinks at every step besides what it chooses ("full:sinks=4+quest:read_budget=512")
#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

void register_full() {
    register_preset({"full",
                     "no compression (reference)",
                     {int_param("sinks", 0, kMaxTokens, "0",
                                "s: first entries held in the sink region, read at every step by a read-time selection",
                                "StreamingLLM §3.2")},
                     [](PolicyParams& p) {
                         Policy pol;
                         pol.sinks = static_cast<int>(p.get_int("sinks"));
                         return pol;
                     }});
}

}  // namespace kvsieve
