#pragma once
// /metrics: the server's counters and the KV pool's state in Prometheus' text exposition format.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "serve/scheduler.h"

namespace kvsieve {

/// The `endpoint` label of a request path: the route template it matched ("/v1/cache/conversations/{id}" for
/// every id) or "other" for a path no route serves, so that clients cannot grow the label set (one series per
/// route and status at most).
std::string route_label(const std::string& path);

/// HTTP requests answered, per endpoint and status. Thread-safe. Give it route_label()s, not raw paths.
class HttpCounters {
public:
    void count(const std::string& endpoint, int status);
    std::map<std::pair<std::string, int>, int64_t> snapshot() const;

private:
    mutable std::mutex mu_;
    std::map<std::pair<std::string, int>, int64_t> n_;
};

/// The exposition text (version 0.0.4): counters (requests per endpoint and status; requests finished, failed,
/// refused with 503 and cancelled; prompt and generated tokens; prefill and decode rows and seconds), gauges (prefill
/// and decode tokens/s since start, KV bytes in use and free, pool pages in use and capacity, slots busy, queue
/// length), per policy the mean density and compression ratio of its finished requests, and per active slot its
/// live KV entries, bytes, density and compression ratio; histograms of finished requests (time to first token,
/// inter-token latency, duration and queue time in seconds; prompt and generated tokens), finished requests per
/// finish reason, and running / waiting gauges.
std::string prometheus_text(const SchedulerSnapshot& s, const HttpCounters& http, const std::string& model_id);

}  // namespace kvsieve
