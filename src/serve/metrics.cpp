#include "serve/metrics.h"

#include <sstream>

#include "serve/routes.h"

namespace kvsieve {

std::string route_label(const std::string& path) {
    const std::string r = match_route_path(path);
    return r.empty() ? "other" : r;
}

void HttpCounters::count(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lk(mu_);
    ++n_[{endpoint, status}];
}

std::map<std::pair<std::string, int>, int64_t> HttpCounters::snapshot() const {
    std::lock_guard<std::mutex> lk(mu_);
    return n_;
}

namespace {
/// A label value with \, " and newline escaped as the format asks.
std::string label(const std::string& v) {
    std::string out;
    for (char c : v) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

class Writer {
public:
    void family(const std::string& name, const char* type, const std::string& help) {
        o_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    }
    template <class T>
    void sample(const std::string& name, const std::string& labels, T value) {
        o_ << name;
        if (!labels.empty()) o_ << "{" << labels << "}";
        o_ << " " << value << "\n";
    }
    template <class T>
    void one(const std::string& name, const char* type, const std::string& help, T value) {
        family(name, type, help);
        sample(name, "", value);
    }
    /// A histogram family: cumulative `_bucket{le}` samples, `_sum` and `_count`.
    void histogram(const std::string& name, const std::string& help, const Histogram& h) {
        family(name, "histogram", help);
        int64_t cumulative = 0;
        for (size_t i = 0; i < h.bounds.size(); ++i) {
            cumulative += h.counts[i];
            std::ostringstream le;
            le << h.bounds[i];
            sample(name + "_bucket", "le=\"" + le.str() + "\"", cumulative);
        }
        sample(name + "_bucket", "le=\"+Inf\"", h.count);
        sample(name + "_sum", "", h.sum);
        sample(name + "_count", "", h.count);
    }
    std::string str() const { return o_.str(); }

private:
    std::ostringstream o_;
};
}  // namespace

// Longer than ~80 lines on purpose: one flat list of the metrics, in the order /metrics prints them.
std::string prometheus_text(const SchedulerSnapshot& s, const HttpCounters& http, const std::string& model_id) {
    Writer w;
    w.family("kvsieve_info", "gauge", "the model served");
    w.sample("kvsieve_info", "model=\"" + label(model_id) + "\"", 1);
    w.family("kvsieve_http_requests_total", "counter", "HTTP requests answered, per endpoint and status");
    for (const auto& [k, n] : http.snapshot())
        w.sample("kvsieve_http_requests_total",
                 "endpoint=\"" + label(k.first) + "\",status=\"" + std::to_string(k.second) + "\"", n);
    w.one("kvsieve_requests_finished_total", "counter", "generation requests that ended normally", s.requests_finished);
    w.one("kvsieve_requests_failed_total", "counter", "generation requests that ended with a server error",
          s.requests_failed);
    w.one("kvsieve_requests_refused_total", "counter",
          "generation requests refused with 503 (queue full or KV pool exhausted)", s.requests_refused);
    w.one("kvsieve_requests_cancelled_total", "counter", "generation requests dropped because the client went away",
          s.requests_cancelled);
    w.one("kvsieve_prompt_tokens_total", "counter", "prompt tokens of admitted requests", s.prompt_tokens);
    w.one("kvsieve_generated_tokens_total", "counter", "tokens sampled", s.generated_tokens);
    w.one("kvsieve_prefill_tokens_processed_total", "counter", "prompt tokens run through the model", s.prefill_rows);
    w.one("kvsieve_decode_tokens_processed_total", "counter", "decode tokens run through the model", s.decode_rows);
    w.one("kvsieve_prefill_seconds_total", "counter", "step time spent on prompt tokens (batched steps split by rows)",
          s.prefill_s);
    w.one("kvsieve_decode_seconds_total", "counter", "step time spent on decode tokens (batched steps split by rows)",
          s.decode_s);
    w.one("kvsieve_steps_total", "counter", "batched forward steps", s.steps);
    w.one("kvsieve_prefill_tokens_per_second", "gauge", "prompt tokens per second of prefill time since start",
          s.prefill_s > 0 ? s.prefill_rows / s.prefill_s : 0.0);
    w.one("kvsieve_decode_tokens_per_second", "gauge",
          "decode tokens per second of decode time since start (all slots)",
          s.decode_s > 0 ? s.decode_rows / s.decode_s : 0.0);
    w.one("kvsieve_kv_bytes_in_use", "gauge", "bytes of KV pages held by sequences", s.pool_bytes_in_use);
    w.one("kvsieve_kv_bytes_free", "gauge", "bytes of KV pages the pool can still give",
          s.pool_bytes_capacity - s.pool_bytes_in_use);
    w.one("kvsieve_kv_pool_pages_in_use", "gauge", "KV pool pages in use", s.pool_pages_in_use);
    w.one("kvsieve_kv_pool_pages_capacity", "gauge", "KV pool pages in all", s.pool_pages_capacity);
    w.one("kvsieve_kv_page_bytes", "gauge", "bytes of one KV page (16 entries of one KV head, keys and values)",
          s.pool_page_bytes);
    w.one("kvsieve_slots", "gauge", "sequences that may run at once", s.slots);
    w.one("kvsieve_slots_busy", "gauge", "sequences running", static_cast<int64_t>(s.active.size()));
    w.one("kvsieve_queue_length", "gauge", "requests waiting for a slot", s.queued);
    w.one("kvsieve_requests_running", "gauge", "generation requests running in a slot",
          static_cast<int64_t>(s.active.size()));
    w.one("kvsieve_requests_waiting", "gauge", "generation requests queued for a slot", s.queued);
    w.histogram("kvsieve_time_to_first_token_seconds",
                "seconds from a request's arrival to its first token (finished requests)", s.time_to_first_token_s);
    w.histogram("kvsieve_inter_token_latency_seconds", "seconds between two consecutive tokens of one request",
                s.inter_token_s);
    w.histogram("kvsieve_request_duration_seconds", "seconds from a request's arrival to its end (finished requests)",
                s.request_duration_s);
    w.histogram("kvsieve_request_queue_seconds", "seconds a finished request waited for a slot", s.queue_time_s);
    w.histogram("kvsieve_request_prompt_tokens", "prompt tokens per finished request", s.request_prompt_tokens);
    w.histogram("kvsieve_request_generated_tokens", "generated tokens per finished request",
                s.request_generated_tokens);
    w.family("kvsieve_request_finish_total", "counter", "finished requests per finish reason (stop, length)");
    for (const auto& [reason, n] : s.finish_reasons)
        w.sample("kvsieve_request_finish_total", "reason=\"" + label(reason) + "\"", n);
    uint64_t kept_bytes = 0;
    for (const auto& c : s.conversations) kept_bytes += c.kv_bytes;
    w.one("kvsieve_conversations_kept", "gauge", "sequences kept between requests under a conversation id",
          static_cast<int64_t>(s.conversations.size()));
    w.one("kvsieve_conversations_kv_bytes", "gauge", "bytes of KV pages the kept conversations hold", kept_bytes);
    w.one("kvsieve_conversations_dropped_total", "counter",
          "kept conversations dropped for the pages of running requests", s.conversations_dropped);
    w.one("kvsieve_prompt_tokens_cached_total", "counter",
          "prompt tokens a kept conversation already held (not run again)", s.prompt_tokens_cached);
    w.family("kvsieve_policy_requests_finished_total", "counter", "finished requests per KV policy");
    for (const auto& [p, t] : s.by_policy)
        w.sample("kvsieve_policy_requests_finished_total", "policy=\"" + label(p) + "\"", t.finished);
    w.family("kvsieve_policy_density", "gauge",
             "mean density (kept fraction beyond the local window) of finished requests per KV policy");
    for (const auto& [p, t] : s.by_policy)
        w.sample("kvsieve_policy_density", "policy=\"" + label(p) + "\"",
                 t.finished ? t.density_sum / t.finished : 1.0);
    w.family("kvsieve_policy_compression_ratio", "gauge",
             "mean compression ratio (removed fraction of entries) of finished requests per KV policy");
    for (const auto& [p, t] : s.by_policy)
        w.sample("kvsieve_policy_compression_ratio", "policy=\"" + label(p) + "\"",
                 t.finished ? t.compression_ratio_sum / t.finished : 0.0);
    w.family("kvsieve_slot_live_entries", "gauge", "KV entries a running sequence keeps (all layers and KV heads)");
    for (const auto& a : s.active)
        w.sample("kvsieve_slot_live_entries",
                 "slot=\"" + std::to_string(a.slot) + "\",policy=\"" + label(a.policy) + "\"", a.live_entries);
    w.family("kvsieve_slot_kv_bytes", "gauge", "bytes of KV pages a running sequence holds");
    for (const auto& a : s.active)
        w.sample("kvsieve_slot_kv_bytes", "slot=\"" + std::to_string(a.slot) + "\"", a.kv_bytes);
    w.family("kvsieve_slot_density", "gauge", "density of a running sequence's cache");
    for (const auto& a : s.active)
        w.sample("kvsieve_slot_density", "slot=\"" + std::to_string(a.slot) + "\"", a.density);
    w.family("kvsieve_slot_compression_ratio", "gauge", "compression ratio of a running sequence's cache");
    for (const auto& a : s.active)
        w.sample("kvsieve_slot_compression_ratio", "slot=\"" + std::to_string(a.slot) + "\"", a.compression_ratio);
    return w.str();
}

}  // namespace kvsieve
