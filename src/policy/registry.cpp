// The list of presets. A new method is one file in policy/ plus one line here.
#include "policy/policy.h"

namespace kvsieve {

void register_full();
void register_streaming_llm();
void register_random();
void register_knorm();
void register_h2o();
void register_tova();
void register_snapkv();
void register_pyramidkv();
void register_expected_attention();
void register_kvzap();
void register_kvzip();
void register_spkv();
void register_wgkv();
void register_kvpop();
void register_quest();
void register_hybrid_heads();

void register_all_presets() {
    register_full();
    register_streaming_llm();
    register_random();
    register_knorm();
    register_h2o();
    register_tova();
    register_snapkv();
    register_pyramidkv();
    register_expected_attention();
    register_kvzap();
    register_kvzip();
    register_spkv();
    register_wgkv();
    register_kvpop();
    register_quest();
    register_hybrid_heads();
}

}  // namespace kvsieve
