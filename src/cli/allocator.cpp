// jemalloc settings, read by jemalloc at start-up when the tool is linked with it (training builds): freed pages
// stay mapped for reuse instead of being returned and faulted in again. The KV pool manages its own arena
// (cache/kv_pool.h), so its resident size still follows the pages in use.
extern "C" {
const char* malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1,retain:true";
}
