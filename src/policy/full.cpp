// full: the uncompressed cache; every entry is kept.
//   full[:sinks=S]   S > 0 keeps the first S entries in the sink region: still every entry is kept, but a read-time
//                    selection reads the sinks at every step besides what it chooses ("full:sinks=4+quest:read_budget=512")
//   full[:window=W]  W > 0 holds the W most recent entries in the local window ring, and every entry leaving it is
//                    admitted to the global region: still every entry is kept, but with a quantized cache quantized
//                    at admission (--kv-quant-at admission) the sinks and the window stay F16 while the rest is
//                    quantized: the full-cache reference of that mode
#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

void register_full() {
    register_preset({"full",
                     "no compression (reference)",
                     {int_param("sinks", 0, kMaxTokens, "0",
                                "s: first entries held in the sink region, read at every step by a read-time selection",
                                "StreamingLLM §3.2"),
                      int_param("window", 0, kMaxTokens, "0",
                                "w: most recent entries held in the local window ring; each one leaving it is kept in "
                                "the global region (binary16 under --kv-quant-at admission, the rest quantized)",
                                "design.md §3")},
                     [](PolicyParams& p) {
                         Policy pol;
                         pol.sinks = static_cast<int>(p.get_int("sinks"));
                         pol.window = static_cast<int>(p.get_int("window"));
                         return pol;
                     }});
}

}  // namespace kvsieve
