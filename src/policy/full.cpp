// full: the uncompressed cache; every entry is kept.
#include "policy/policy.h"

namespace kvsieve {

void register_full() {
    register_preset({"full", "no compression (reference)", [](PolicyParams&) { return Policy{}; }});
}

}  // namespace kvsieve
