// jemalloc settings, read by jemalloc at start-up when the tool is linked with it (training builds): freed pages
// stay mapped for 10 s for reuse instead of being returned and faulted in again at once, then go back to the system.
// (Never returning them, dirty_decay_ms:-1, let a SmolLM2 KVpop fine-tuning run grow by ~1 GB per step, 9 -> 18 GB in
// 6 steps, where 10 s kept it between 3 and 8 GB for ~10% more time per step, same machine.) The KV pool manages its
// own arena (cache/kv_pool.h), so its resident size still follows the pages in use. MALLOC_CONF overrides these.
extern "C" {
const char* malloc_conf = "dirty_decay_ms:10000,muzzy_decay_ms:0,retain:true";
}
