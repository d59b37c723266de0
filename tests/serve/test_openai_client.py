"""The official openai client against a running `kvsieve serve` (SmolLM2-135M-Instruct): chat, streaming,
completions, kv_policy, errors, seeds, concurrent requests, cancellation, /health and /metrics.
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


def metric(name):
    _, text = get("/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


class OpenAIClient(unittest.TestCase):
    def test_models_and_health(self):
        ids = [m.id for m in client.models.list().data]
        self.assertEqual(ids, ["SmolLM2-135M-Instruct.Q4_1"])
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

    def test_stop_string(self):
        r = client.completions.create(model="m", prompt="The capital of France is", temperature=0, max_tokens=8,
                                      stop=["."])
        self.assertEqual(r.choices[0].text, " Paris")
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_seed_makes_sampling_repeatable(self):
        a = client.completions.create(model="m", prompt=STORY[:200], temperature=0.9, seed=7, max_tokens=20)
        b = client.completions.create(model="m", prompt=STORY[:200], temperature=0.9, seed=7, max_tokens=20)
        self.assertEqual(a.choices[0].text, b.choices[0].text)

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
            client.completions.create(model="m", prompt="x", n=2)
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

    def test_client_that_leaves_frees_its_pages(self):
        cancelled0 = metric("kvsieve_requests_cancelled_total")
        stream = client.completions.create(model="m", prompt=STORY, temperature=0.8, max_tokens=1500, stream=True)
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
        self.assertEqual(metric("kvsieve_kv_bytes_in_use"), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
