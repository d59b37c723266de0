"""The official openai client against a running `kvsieve serve` (SmolLM2-135M-Instruct): chat, streaming,
completions, kv_policy, errors, seeds, concurrent requests, cancellation, conversations kept between turns,
saved and restored sequences (/v1/cache/*), /health and /metrics.
Usage: test_openai_client.py BASE_URL"""
import concurrent.futures
import json
import sys
import time
import unittest
import urllib.error
import urllib.request

import openai

BASE = sys.argv.pop(1) if len(sys.argv) > 1 else "http://127.0.0.1:8080"
client = openai.OpenAI(base_url=BASE + "/v1", api_key="none", max_retries=0, timeout=600)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
STORY = ("Once upon a time, in a small village by the sea, there lived an old fisherman named Tom. Every morning he "
         "took his boat out before sunrise and came back with fish for the whole village. ") * 8


def get(path):
    with urllib.request.urlopen(BASE + path, timeout=60) as r:
        return r.status, r.read().decode()


def send(method, path, body=None):
    """(status, parsed JSON body) of a request with a JSON body; HTTP errors are returned, not raised."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def metric(name):
    _, text = get("/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


class OpenAIClient(unittest.TestCase):
    def test_models_and_health(self):
        ids = [m.id for m in client.models.list().data]
        self.assertEqual(ids, ["m", "SmolLM2-135M-Instruct.Q4_1"])  # --alias m, then the file's name
        status, body = get("/health")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["status"], "ok")

    def test_chat_greedy_and_usage(self):
        r = client.chat.completions.create(model="m", messages=QUESTION, temperature=0, max_tokens=24)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertGreater(len(r.choices[0].message.content), 0)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        u = r.usage
        self.assertGreater(u.prompt_tokens, 10)
        self.assertEqual(u.total_tokens, u.prompt_tokens + u.completion_tokens)
        extra = r.usage.model_extra
        self.assertGreater(extra["kv_bytes"], 0)
        self.assertEqual(extra["density"], 1.0)
        self.assertEqual(extra["compression_ratio"], 0.0)

    def test_chat_stream_equals_the_whole_answer(self):
        whole = client.chat.completions.create(model="m", messages=QUESTION, temperature=0, max_tokens=24)
        stream = client.chat.completions.create(model="m", messages=QUESTION, temperature=0, max_tokens=24, stream=True,
                                                stream_options={"include_usage": True})
        parts, finish, usage, roles = [], None, None, []
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                if c.delta.role:
                    roles.append(c.delta.role)
                if c.delta.content:
                    parts.append(c.delta.content)
                if c.finish_reason:
                    finish = c.finish_reason
        self.assertEqual(roles, ["assistant"])
        self.assertEqual("".join(parts), whole.choices[0].message.content)
        self.assertEqual(finish, whole.choices[0].finish_reason)
        self.assertEqual(usage.completion_tokens, whole.usage.completion_tokens)
        self.assertGreater(len(parts), 3)

    def test_completion_greedy_and_stream(self):
        r = client.completions.create(model="m", prompt="The capital of France is", temperature=0, max_tokens=8)
        self.assertTrue(r.choices[0].text.startswith(" Paris"), r.choices[0].text)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 8)
        text = "".join(c.choices[0].text for c in client.completions.create(
            model="m", prompt="The capital of France is", temperature=0, max_tokens=8, stream=True))
        self.assertEqual(text, r.choices[0].text)

    def test_logprobs_parse_in_the_clients_types(self):
        r = client.chat.completions.create(model="m", messages=QUESTION, temperature=0, max_tokens=4, logprobs=True,
                                           top_logprobs=2)
        content = r.choices[0].logprobs.content
        self.assertEqual("".join(t.token for t in content), r.choices[0].message.content)
        self.assertTrue(all(t.logprob == t.top_logprobs[0].logprob for t in content))
        e = client.completions.create(model="m", prompt="The capital of France is", max_tokens=0, echo=True,
                                      logprobs=1)
        self.assertEqual(e.choices[0].text, "The capital of France is")
        self.assertIsNone(e.choices[0].logprobs.token_logprobs[0])
        self.assertLess(sum(e.choices[0].logprobs.token_logprobs[1:]), 0)
        with self.assertRaises(openai.NotFoundError):
            client.completions.create(model="gpt-4o", prompt="x")

    def test_stop_string(self):
        r = client.completions.create(model="m", prompt="The capital of France is", temperature=0, max_tokens=8,
                                      stop=["."])
        self.assertEqual(r.choices[0].text, " Paris")
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_seed_makes_sampling_repeatable(self):
        a = client.completions.create(model="m", prompt=STORY[:200], temperature=0.9, seed=7, max_tokens=20)
        b = client.completions.create(model="m", prompt=STORY[:200], temperature=0.9, seed=7, max_tokens=20)
        self.assertEqual(a.choices[0].text, b.choices[0].text)

    def test_learned_presets_ready_for_the_model(self):
        # The predictors shipped for SmolLM2 register themselves: /v1/models names them (default first), and a
        # request's kv_policy takes a learned preset without model= or with a shipped predictor's name.
        ready = client.models.list().data[0].model_extra["kv_predictors"]
        self.assertEqual(ready["kvzap"][0], "smollm2-135m-mlp")
        self.assertIn("smollm2-135m-linear", ready["kvzap"])
        self.assertEqual(ready["wgkv"], ["smollm2-135m-lambda0.04"])
        self.assertEqual(ready["kvpop"], ["smollm2-135m-mlstm"])
        for spec in ("wgkv", "kvpop", "kvzap:model=smollm2-135m-linear"):
            r = client.completions.create(model="m", prompt=STORY, temperature=0, max_tokens=4,
                                          extra_body={"kv_policy": spec})
            self.assertGreater(r.usage.completion_tokens, 0, spec)

    def test_kv_policy_per_request(self):
        full = client.completions.create(model="m", prompt=STORY, temperature=0, max_tokens=4)
        snap = client.completions.create(model="m", prompt=STORY, temperature=0, max_tokens=4,
                                         extra_body={"kv_policy": "snapkv:ratio=0.5"})
        fu, su = full.usage.model_extra, snap.usage.model_extra
        self.assertEqual(fu["compression_ratio"], 0.0)
        self.assertGreater(su["compression_ratio"], 0.4)
        self.assertLess(su["kv_bytes"], 0.7 * fu["kv_bytes"])
        _, text = get("/metrics")
        self.assertIn('kvsieve_policy_compression_ratio{policy="snapkv:ratio=0.5"}', text)

    def test_errors_are_4xx_with_a_message(self):
        with self.assertRaises(openai.BadRequestError) as e:
            client.completions.create(model="m", prompt="x", extra_body={"kv_policy": "nosuch"})
        self.assertIn("kv_policy", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            client.completions.create(model="m", prompt="x", n=9)
        self.assertIn("'n'", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            client.chat.completions.create(model="m", messages=[{"role": "tool", "content": "x", "tool_call_id": "1"}])
        with self.assertRaises(openai.BadRequestError) as e:
            client.completions.create(model="m", prompt="word " * 3000)
        self.assertIn("context", str(e.exception))

    def test_oversized_body_and_unknown_paths_are_json_errors(self):
        body = json.dumps({"prompt": "a " * 700000}).encode()  # 1.4 MB; the server runs with --max-body-mb 1
        req = urllib.request.Request(BASE + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=60)
        self.assertEqual(e.exception.code, 413)
        self.assertIn("larger than the server's limit", json.loads(e.exception.read())["error"]["message"])
        with self.assertRaises(urllib.error.HTTPError) as e:
            get("/v2/nothing")
        self.assertEqual(e.exception.code, 404)
        self.assertIn("no endpoint", json.loads(e.exception.read())["error"]["message"])
        bad = urllib.request.Request(BASE + "/v1/chat/completions", data=b"{not json", headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad, timeout=60)
        self.assertEqual(e.exception.code, 400)
        self.assertIn("not valid JSON", json.loads(e.exception.read())["error"]["message"])

    def test_concurrent_requests_are_batched_and_each_correct(self):
        alone = client.chat.completions.create(model="m", messages=QUESTION, temperature=0, max_tokens=20)
        steps0, rows0 = metric("kvsieve_steps_total"), metric("kvsieve_decode_tokens_processed_total")
        with concurrent.futures.ThreadPoolExecutor(6) as ex:
            outs = list(ex.map(lambda _: client.chat.completions.create(
                model="m", messages=QUESTION, temperature=0, max_tokens=20), range(6)))
        for o in outs:
            self.assertEqual(o.choices[0].message.content, alone.choices[0].message.content)
        steps = metric("kvsieve_steps_total") - steps0
        rows = metric("kvsieve_decode_tokens_processed_total") - rows0
        self.assertLess(steps, rows)  # several sequences per step

    def test_saved_sequence_continues(self):
        # 6 tokens saved under a name, 6 more from it == 12 in one request (greedy); new text after it works too.
        prompt = "The capital of France is"
        whole = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=12,
                                          extra_body={"kv_policy": "h2o:budget=64"})
        first = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=6,
                                          extra_body={"kv_policy": "h2o:budget=64", "cache_save": "france"})
        self.assertGreater(first.usage.model_extra["cache_saved_bytes"], 0)
        rest = client.completions.create(model="m", prompt="", temperature=0, max_tokens=6,
                                         extra_body={"cache_restore": "france"})
        self.assertEqual(first.choices[0].text + rest.choices[0].text, whole.choices[0].text)
        more = client.completions.create(model="m", prompt=" Also,", temperature=0, max_tokens=4,
                                         extra_body={"cache_restore": "france"})
        self.assertEqual(more.usage.prompt_tokens, 2)
        with self.assertRaises(openai.NotFoundError):
            client.completions.create(model="m", prompt="x", extra_body={"cache_restore": "nothing-saved"})
        with self.assertRaises(openai.BadRequestError):
            client.completions.create(model="m", prompt="x", extra_body={"cache_restore": "france", "kv_policy": "full"})

    def test_conversation_keeps_its_cache_between_turns(self):
        # Turn 2 sends the whole history again; the kept cache already holds turn 1 (prompt and answer), so only
        # the new tokens run. Then: save it, restore it under another id, go on from that, drop both.
        msgs = [{"role": "user", "content": "What is the capital of France?"}]
        a = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=20,
                                           extra_body={"conversation": "paris"})
        self.assertEqual(a.usage.prompt_tokens_details.cached_tokens, 0)
        status, listed = send("GET", "/v1/cache/conversations")
        self.assertEqual(status, 200)
        kept = {c["id"]: c for c in listed["data"]}
        self.assertIn("paris", kept)
        self.assertGreater(kept["paris"]["kv_bytes"], 0)
        msgs += [{"role": "assistant", "content": a.choices[0].message.content},
                 {"role": "user", "content": "And the capital of Italy?"}]
        b = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=20,
                                           extra_body={"conversation": "paris"})
        self.assertGreater(len(b.choices[0].message.content), 0)
        self.assertGreaterEqual(b.usage.prompt_tokens_details.cached_tokens, a.usage.prompt_tokens)
        self.assertGreater(metric("kvsieve_prompt_tokens_cached_total"), 0)

        status, saved = send("POST", "/v1/cache/save", {"name": "paris-file", "conversation": "paris"})
        self.assertEqual(status, 200, saved)
        self.assertEqual(saved["object"], "kv_cache.saved")
        self.assertGreater(saved["file_bytes"], 0)
        status, restored = send("POST", "/v1/cache/restore", {"name": "paris-file", "conversation": "paris-2"})
        self.assertEqual(status, 200, restored)
        self.assertEqual(restored["tokens"], saved["tokens"])
        msgs += [{"role": "assistant", "content": b.choices[0].message.content},
                 {"role": "user", "content": "Thank you."}]
        c = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=8,
                                           extra_body={"conversation": "paris-2"})
        self.assertGreater(c.usage.prompt_tokens_details.cached_tokens, b.usage.prompt_tokens // 2)

        # Errors name the problem.
        self.assertEqual(send("POST", "/v1/cache/save", {"name": "x", "conversation": "nobody"})[0], 404)
        self.assertEqual(send("POST", "/v1/cache/save", {"name": "x", "slot": 99})[0], 404)
        self.assertEqual(send("POST", "/v1/cache/restore", {"name": "never-saved"})[0], 404)
        status, err = send("POST", "/v1/cache/save", {"name": "x"})
        self.assertEqual(status, 400)
        self.assertIn("'conversation' (an id) or 'slot'", err["error"]["message"])
        status, err = send("POST", "/v1/cache/save", {"name": "../up", "conversation": "paris"})
        self.assertEqual(status, 400)
        with self.assertRaises(openai.BadRequestError):
            client.completions.create(model="m", prompt="x", extra_body={"conversation": "a b"})

        for cid in ("paris", "paris-2"):
            status, body = send("DELETE", "/v1/cache/conversations/" + cid)
            self.assertEqual(status, 200, body)
            self.assertTrue(body["deleted"])
        self.assertEqual(send("DELETE", "/v1/cache/conversations/paris")[0], 404)

    def test_running_slot_saved_and_continued(self):
        # Save a slot while it streams; the file restored with no new text continues the answer exactly.
        prompt = STORY
        whole = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=48).choices[0].text
        stream = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=48, stream=True)
        got, saved = [], None
        for ev in stream:
            got.append(ev.choices[0].text if ev.choices else "")
            if saved is None and len(got) >= 3:
                slots = [int(line.split('slot="')[1].split('"')[0]) for line in get("/metrics")[1].splitlines()
                         if line.startswith("kvsieve_slot_kv_bytes{")]
                self.assertEqual(len(slots), 1)
                status, saved = send("POST", "/v1/cache/save", {"name": "dragon", "slot": slots[0]})
                self.assertEqual(status, 200, saved)
        self.assertIsNotNone(saved, "the answer ended before the slot could be saved")
        self.assertEqual("".join(got), whole)
        generated = saved["tokens"] - client.completions.create(model="m", prompt=prompt, max_tokens=1).usage.prompt_tokens
        rest = client.completions.create(model="m", prompt="", temperature=0, max_tokens=48 - generated,
                                         extra_body={"cache_restore": "dragon"}).choices[0].text
        self.assertTrue(rest)
        self.assertTrue(whole.endswith(rest), (whole, rest))

    def test_client_that_leaves_frees_its_pages(self):
        cancelled0 = metric("kvsieve_requests_cancelled_total")
        # SmolLM2's end tokens (<|endoftext|> 0, <|im_end|> 2) are banned so the answer outlasts the client.
        stream = client.completions.create(model="m", prompt=STORY, temperature=0.8, max_tokens=1500, stream=True,
                                           logit_bias={"0": -100, "2": -100})
        for i, _ in enumerate(stream):
            if i == 3:
                break
        stream.close()
        for _ in range(200):
            if metric("kvsieve_requests_cancelled_total") > cancelled0 and metric("kvsieve_slots_busy") == 0:
                break
            time.sleep(0.05)
        self.assertGreater(metric("kvsieve_requests_cancelled_total"), cancelled0)
        self.assertEqual(metric("kvsieve_slots_busy"), 0)
        # Only kept conversations (of other tests) hold pages.
        self.assertEqual(metric("kvsieve_kv_bytes_in_use"), metric("kvsieve_conversations_kv_bytes"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
