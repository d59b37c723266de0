// kvzip / kvzip_plus: query-agnostic importance from context reconstruction (Kim et al. 2025, "KVzip:
// Query-Agnostic KV Cache Compression with Context Reconstruction", §3; KVzip+ normalisation from the KVzap
// paper §3.2; kvpress KVzipPress). After the prefill the model is asked to repeat the context; entry i of a
// KV head scores s_i = max over the repeated tokens j and the G query heads of a_ji (softmax over sinks, the
// chunk being repeated and the repeat itself), times ‖W_O,head vᵢ‖ / ‖h_j‖ for KVzip+. The first `sinks`
// entries are kept (max + 1). The replay itself is model/kvzip_replay.cpp; this file is the preset.
//   kvzip[_plus]:ratio=R[,rule=global|layer|head|threshold,tau=T][,sinks=4][,chunk=2048]
#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

namespace {
Policy make_kvzip(PolicyParams& p, ReplaySpec::Kind kind) {
    Policy pol;
    pol.sinks = 4;  // read as the replay's sinks: scored max + 1, not a separate region (as kvpress)
    read_budget_rule(p, pol, 0.5, "global");
    require(pol.timing == Timing::kAfterPrefill, "policy ", p.preset(), ": KVzip scores once, after the prefill (every=0)");
    pol.replay.kind = kind;
    const int64_t chunk = p.get_int("chunk", 2048);
    require(chunk > 0, "policy ", p.preset(), ": chunk must be positive");
    pol.replay.sinks = pol.sinks;
    pol.sinks = 0;
    pol.replay.chunk = chunk;
    return pol;
}
}  // namespace

void register_kvzip() {
    register_preset({"kvzip", "context-reconstruction attention (Kim et al. 2025)",
                     [](PolicyParams& p) { return make_kvzip(p, ReplaySpec::Kind::kKVzip); }});
    register_preset({"kvzip_plus", "KVzip with ‖W_O v‖ / ‖h‖ normalisation (KVzap paper §3.2)",
                     [](PolicyParams& p) { return make_kvzip(p, ReplaySpec::Kind::kKVzipPlus); }});
}

}  // namespace kvsieve
