#!/usr/bin/env python3
"""A bounded load test of `kvsieve serve` on loopback: N concurrent streaming clients send a fixed number of
requests, then it stops. Reports throughput, time to first token and latency percentiles, how many requests
ended normally, were refused with 503 (KV pool or queue full) or cancelled on purpose, and checks that no request
was lost (every one ended with [DONE], a 503 or its planned cancellation) and that the server is healthy afterwards
(/health 200, no busy slot, no KV page in use). Standard library only. Exit status 1 when a check fails.

  python3 scripts/loadtest.py --url http://127.0.0.1:8080 --clients 8 --requests 32 --max-tokens 64
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
import urllib.request

WORDS = ("the old fisherman took his boat out before sunrise and came back with fish for the whole village while "
         "children ran along the shore and the baker opened his shop near the harbour ").split()


def prompt_of(n_words, i):
    """A prompt of about n_words words, different for each request i (so no two requests are the same)."""
    words = [f"Story {i}:"] + [WORDS[(i + k) % len(WORDS)] for k in range(n_words)]
    return " ".join(words)


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def get(url, path):
    with urllib.request.urlopen(url + path, timeout=30) as r:
        return r.status, r.read().decode()


def metrics(url):
    _, text = get(url, "/metrics")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.split()
            out[name] = float(value)
    return out


class Result:
    def __init__(self):
        self.outcome = "lost"
        self.detail = ""
        self.ttft = None
        self.latency = None
        self.tokens = 0
        self.usage = None


def one_request(args, i, cancel_now):
    """One streaming request. cancel_now() is called once, at the stream's second token, and says whether this
    request disconnects there (so cancellations count streams that are running, not request numbers: which requests
    the pool refuses depends on timing)."""
    r = Result()
    u = urllib.parse.urlparse(args.url)
    body = {"prompt": prompt_of(args.prompt_words, i), "max_tokens": args.max_tokens, "temperature": args.temperature,
            "seed": i, "stream": True, "stream_options": {"include_usage": True}}
    if args.policy:
        body["kv_policy"] = args.policy
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=args.timeout)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            payload = resp.read().decode(errors="replace")
            r.outcome = "refused" if resp.status == 503 else "error"
            r.detail = f"HTTP {resp.status}: {payload[:200]}"
            return r
        chunks = 0
        while True:
            line = resp.readline()
            if not line:
                r.detail = "the stream ended without [DONE]"
                return r
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                r.outcome = "ok"
                r.latency = time.perf_counter() - t0
                return r
            ev = json.loads(data)
            if "error" in ev:
                # The error object's status is the HTTP status (its code is a string such as "server_busy").
                r.outcome = "refused" if ev["error"].get("status") == 503 else "error"
                r.detail = ev["error"].get("message", "")
                return r
            if ev.get("usage"):
                r.usage = ev["usage"]
                r.tokens = ev["usage"]["completion_tokens"]
            if ev.get("choices") and ev["choices"][0].get("text"):
                chunks += 1
                if r.ttft is None:
                    r.ttft = time.perf_counter() - t0
                if chunks == 2 and cancel_now():
                    r.outcome = "cancelled"
                    return r
    except Exception as e:  # a broken connection is a lost request
        r.detail = f"{type(e).__name__}: {e}"
        return r
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--clients", type=int, default=8, help="concurrent streaming clients")
    ap.add_argument("--requests", type=int, default=32, help="requests in all")
    ap.add_argument("--prompt-words", type=int, default=200, help="words per prompt (about 1.2 tokens each)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--policy", default="", help="kv_policy of every request (default: the server's)")
    ap.add_argument("--cancel-every", type=int, default=0,
                    help="every K-th running stream (counted at its second token) disconnects there")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", default="", help="write the summary here")
    args = ap.parse_args()

    results = [None] * args.requests
    next_i = [0]
    streams = [0]  # streams that reached their second token
    lock = threading.Lock()
    peak = {"kvsieve_slots_busy": 0, "kvsieve_kv_bytes_in_use": 0}
    done = threading.Event()

    def cancel_now():
        with lock:
            streams[0] += 1
            return args.cancel_every > 0 and streams[0] % args.cancel_every == 0

    def client():
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= args.requests:
                return
            results[i] = one_request(args, i, cancel_now)
            with lock:
                n = sum(x is not None for x in results)
            print(f"\r{n}/{args.requests} requests", end="", file=sys.stderr, flush=True)

    def watch():
        while not done.is_set():
            try:
                m = metrics(args.url)
                for k in peak:
                    peak[k] = max(peak[k], m.get(k, 0))
            except Exception:
                pass
            done.wait(0.25)

    m0 = metrics(args.url)
    watcher = threading.Thread(target=watch)
    watcher.start()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done.set()
    watcher.join()
    print(file=sys.stderr)

    # Health afterwards: the server answers, and every slot and page has been given back.
    healthy, m1 = False, {}
    for _ in range(100):
        status, _ = get(args.url, "/health")
        m1 = metrics(args.url)
        if status == 200 and m1["kvsieve_slots_busy"] == 0 and m1["kvsieve_kv_bytes_in_use"] == 0:
            healthy = True
            break
        time.sleep(0.1)

    by = {}
    for r in results:
        by.setdefault(r.outcome, []).append(r)
    ok = by.get("ok", [])
    tokens = sum(r.tokens for r in ok)
    ttft = [r.ttft for r in ok if r.ttft is not None]
    lat = [r.latency for r in ok]
    summary = {
        "clients": args.clients, "requests": args.requests, "prompt_words": args.prompt_words,
        "max_tokens": args.max_tokens, "policy": args.policy or "(server default)",
        "ok": len(ok), "refused_503": len(by.get("refused", [])), "cancelled": len(by.get("cancelled", [])),
        "errors": len(by.get("error", [])), "lost": len(by.get("lost", [])),
        "wall_s": wall, "generated_tokens": tokens, "tokens_per_s": tokens / wall if wall > 0 else 0,
        "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
        "latency_p50_s": percentile(lat, 50), "latency_p99_s": percentile(lat, 99),
        "peak_slots_busy": peak["kvsieve_slots_busy"], "peak_kv_mib": peak["kvsieve_kv_bytes_in_use"] / 2**20,
        "prompt_tokens_per_request": (m1.get("kvsieve_prompt_tokens_total", 0) - m0.get("kvsieve_prompt_tokens_total", 0))
                                     / max(1, args.requests),
        "server_cancelled": m1.get("kvsieve_requests_cancelled_total", 0) - m0.get("kvsieve_requests_cancelled_total", 0),
        "healthy_after": healthy,
    }
    if ok and ok[0].usage:
        summary["density_mean"] = sum(r.usage["density"] for r in ok if r.usage) / len(ok)
        summary["compression_ratio_mean"] = sum(r.usage["compression_ratio"] for r in ok if r.usage) / len(ok)
    for k in ("error", "lost"):
        for r in by.get(k, [])[:3]:
            print(f"{k}: {r.detail}", file=sys.stderr)
    for k, v in summary.items():
        print(f"{k:>28}: {v:.3f}" if isinstance(v, float) else f"{k:>28}: {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    failed = summary["errors"] or summary["lost"] or not healthy
    if failed:
        print("FAILED: " + ("requests were lost or failed" if summary["errors"] or summary["lost"] else
                            "the server did not give back its slots and pages"), file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
