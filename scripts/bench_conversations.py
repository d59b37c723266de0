#!/usr/bin/env python3
"""Conversations that come back: the workload of scripts/bench-vs-llama-server.sh, run against one OpenAI-compatible
server (kvsieve serve or llama-server). Standard library only.

C conversations each open with a document of about DOC_TOKENS tokens (consecutive paragraphs of a corpus, a
different stretch for each conversation) in which three facts are hidden at random depths ("The access code of
the <color> locker is <7 digits>."), and a question about one of them. Then every conversation gets a follow-up
question about the second fact, and then a third about the last: each follow-up sends the whole conversation so far
(the document, the earlier questions and the server's own answers), as a chat client does. Greedy decoding, short
answers; an answer is right when it contains the fact's 7 digits.

The order the turns arrive in (--arrivals):
  round-robin  every conversation's first question, then every second, then every third: each conversation comes
               back after all the others, the order in which a least-recently-used cache keeps the fewest;
  poisson      requests arrive as a Poisson process of --rate per second; each arrival is the next turn of a
               conversation drawn at random among those not waiting for an answer (--seed), so a conversation comes
               back after a random number of others. An arrival that finds every such conversation waiting is
               sent with the next answer.

At most --concurrency requests are in flight at once (one bounded pool of client threads). Per request it records
the time to the first token (streamed), the whole time, the prompt tokens and how many of them the server took
from its cache (kvsieve: usage.prompt_tokens_details.cached_tokens; llama-server: timings.cache_n), and whether the
answer is right. A follow-up is "held" when the server took at least 90% of the previous turn's prompt from its
cache: the conversation was still in memory when it came back.

  python3 scripts/bench_conversations.py --url http://127.0.0.1:8080 --server kvsieve --conversations 16 \
      --corpus data/corpora/wiki.test.raw --out result.json
"""
import argparse
import concurrent.futures
import http.client
import json
import random
import statistics
import sys
import time
import urllib.parse

COLORS = ["red", "blue", "green", "yellow", "purple", "orange", "white", "black", "silver", "golden", "brown", "pink"]


def paragraphs(corpus):
    """The corpus's non-empty lines that look like prose (WikiText: no headings), in order."""
    with open(corpus, encoding="utf-8") as f:
        lines = [ln.strip() for ln in f]
    return [ln for ln in lines if len(ln) > 200 and not ln.startswith("=")]


def make_conversations(n, corpus, doc_chars, seed):
    """n conversations: a document of about doc_chars characters with three facts, and their three questions."""
    rng = random.Random(seed)
    paras = paragraphs(corpus)
    convs = []
    start = 0
    for i in range(n):
        doc, k = [], start
        while sum(len(p) for p in doc) < doc_chars:
            doc.append(paras[k % len(paras)])
            k += 1
        start = k
        colors = rng.sample(COLORS, 3)
        facts = [(c, "%07d" % rng.randrange(10 ** 7)) for c in colors]
        for c, code in facts:
            doc.insert(rng.randrange(len(doc) + 1), "The access code of the %s locker is %s." % (c, code))
        text = "\n\n".join(doc)
        questions = ["What is the access code of the %s locker? Answer with the code only." % c for c, _ in facts]
        convs.append({"id": "c%d" % i, "document": text, "questions": questions, "answers": [code for _, code in facts],
                      "messages": [], "turns": []})
    return convs


def request(url, body, timeout):
    """Streams one chat completion: (status, text, seconds to the first token, seconds in all, last usage, timings)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        data = r.read().decode("utf-8", "replace")
        conn.close()
        return r.status, data[:300], None, time.monotonic() - t0, None, None
    text, first, usage, timings = "", None, None, None
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        ev = json.loads(payload)
        for ch in ev.get("choices") or []:
            piece = (ch.get("delta") or {}).get("content") or ""
            if piece and first is None:
                first = time.monotonic() - t0
            text += piece
        if ev.get("usage"):
            usage = ev["usage"]
        if ev.get("timings"):
            timings = ev["timings"]
    conn.close()
    return 200, text, first, time.monotonic() - t0, usage, timings


def turn(args, conv, q):
    """The conversation's question q: sends the conversation so far and records the answer."""
    msgs = list(conv["messages"])
    if q == 0:
        msgs.append({"role": "user", "content": conv["document"] + "\n\n" + conv["questions"][0]})
    else:
        msgs.append({"role": "user", "content": conv["questions"][q]})
    body = {"model": args.model, "messages": msgs, "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if args.server == "kvsieve":
        body["conversation"] = conv["id"]
    else:
        body["cache_prompt"] = True
    status, text, ttft, total, usage, timings = request(args.url, body, args.timeout)
    prompt = cached = completion = None
    if usage:
        prompt = usage.get("prompt_tokens")
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        completion = usage.get("completion_tokens")
    if timings and timings.get("cache_n") is not None:
        cached = timings["cache_n"]
        if prompt is None and timings.get("prompt_n") is not None:
            prompt = timings["prompt_n"] + timings["cache_n"]
    if completion is None and timings and timings.get("predicted_n") is not None:
        completion = timings["predicted_n"]
    rec = {"conversation": conv["id"], "question": q, "status": status, "ttft_s": ttft, "total_s": total,
           "prompt_tokens": prompt, "cached_tokens": cached, "completion_tokens": completion, "answer": text if status == 200 else None,
           "error": None if status == 200 else text, "expected": conv["answers"][q],
           "right": status == 200 and conv["answers"][q] in text}
    if q > 0 and conv["turns"]:
        prev = conv["turns"][-1].get("prompt_tokens")
        rec["held"] = bool(prev and cached is not None and cached >= 0.9 * prev)
    conv["turns"].append(rec)
    if status == 200:
        conv["messages"] = msgs + [{"role": "assistant", "content": text}]
    return rec


def log_turn(rec):
    print("%s q%d %s ttft %s cached %s/%s %s" % (rec["conversation"], rec["question"], rec["status"],
          "%.2f" % rec["ttft_s"] if rec["ttft_s"] else "-", rec["cached_tokens"], rec["prompt_tokens"],
          "right" if rec["right"] else "wrong"), file=sys.stderr)


def round_robin(args, convs, pool):
    """Every conversation's question q, in conversation order, before any gets question q + 1."""
    for q in range(3):
        for f in concurrent.futures.as_completed([pool.submit(turn, args, c, q) for c in convs]):
            log_turn(f.result())


def poisson(args, convs, pool, rng):
    """Arrivals at exponential gaps of mean 1 / args.rate seconds; each is the next question of a conversation drawn
    with rng among those with questions left and no request in flight."""
    asked = {c["id"]: 0 for c in convs}
    in_flight = {}  # future -> conversation id
    left = 3 * len(convs)
    due = time.monotonic()
    while left:
        ready = [c for c in convs if asked[c["id"]] < 3 and c["id"] not in in_flight.values()]
        now = time.monotonic()
        if ready and now >= due:
            c = rng.choice(ready)
            in_flight[pool.submit(turn, args, c, asked[c["id"]])] = c["id"]
            asked[c["id"]] += 1
            due += rng.expovariate(args.rate)
            continue
        timeout = max(0.0, due - now) if ready else None
        done, _ = concurrent.futures.wait(list(in_flight), timeout=timeout,
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        for f in done:
            del in_flight[f]
            left -= 1
            log_turn(f.result())


def pct(xs, p):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    return xs[min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))]


def wilson(k, n, z=1.96):
    """Wilson's 95% interval of k successes in n, in percent."""
    if n == 0:
        return [None, None]
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5 / d
    return [round(100 * (c - h), 1), round(100 * (c + h), 1)]


def summary(convs, wall):
    recs = [t for c in convs for t in c["turns"]]
    first = [t for t in recs if t["question"] == 0]
    follow = [t for t in recs if t["question"] > 0]
    ok = [t for t in recs if t["status"] == 200]
    s = {"requests": len(recs), "errors": len(recs) - len(ok), "wall_s": round(wall, 2)}
    # Tokens generated by all requests together per second of the run (prefills included: what the clients got).
    gen = [t.get("completion_tokens") for t in ok]
    s["completion_tokens"] = sum(gen) if gen and None not in gen else None
    s["generated_tok_per_s"] = round(s["completion_tokens"] / wall, 2) if s["completion_tokens"] and wall > 0 else None
    for name, rs in (("first", first), ("followup", follow)):
        right = sum(t["right"] for t in rs)
        s[name] = {"n": len(rs), "accuracy": round(100 * right / len(rs), 1) if rs else None,
                   "accuracy_ci95": wilson(right, len(rs)),
                   "ttft_p50_s": pct([t["ttft_s"] for t in rs], 50), "ttft_p99_s": pct([t["ttft_s"] for t in rs], 99)}
    held = [t.get("held") for t in follow if t.get("held") is not None]
    s["followup"]["held"] = sum(held)
    s["followup"]["held_fraction"] = round(sum(held) / len(follow), 3) if follow else None
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--server", choices=["kvsieve", "llama"], required=True)
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--doc-chars", type=int, default=10000, help="document length in characters (~2.5k tokens)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--arrivals", choices=["round-robin", "poisson"], default="round-robin",
                    help="the order the turns arrive in (above)")
    ap.add_argument("--rate", type=float, default=1.0, help="poisson: mean arrivals per second")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if not 1 <= args.conversations <= 1024 or not 1 <= args.concurrency <= 256:
        sys.exit("error: --conversations must be in [1, 1024] and --concurrency in [1, 256]")
    if not 0 < args.rate <= 1000:
        sys.exit("error: --rate must be in (0, 1000] arrivals per second")
    convs = make_conversations(args.conversations, args.corpus, args.doc_chars, args.seed)
    u = urllib.parse.urlparse(args.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("GET", "/v1/models")
    args.model = json.loads(conn.getresponse().read())["data"][0]["id"]  # the served model's own name
    conn.close()
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        if args.arrivals == "round-robin":
            round_robin(args, convs, pool)
        else:
            poisson(args, convs, pool, random.Random(args.seed + 1))
    s = summary(convs, time.monotonic() - t0)
    s["label"], s["conversations"], s["concurrency"], s["doc_chars"] = (args.label, args.conversations,
                                                                       args.concurrency, args.doc_chars)
    s["arrivals"] = args.arrivals
    if args.arrivals == "poisson":
        s["rate_per_s"] = args.rate
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"summary": s, "turns": [t for c in convs for t in c["turns"]]}, f, indent=1)
    print(json.dumps(s))


if __name__ == "__main__":
    main()
