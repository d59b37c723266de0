"""The OpenAI request fields beyond plain generation against `kvsieve serve` on loopback with the tiny test model:
logprobs / top_logprobs (chat and legacy shapes, streamed and not), echo with the prompt's log-probabilities and
max_tokens 0, n > 1, presence / frequency penalties, model names (404 model_not_found, --alias) and the tokenizer
endpoints. Python standard library only. Usage: test_openai_fields.py KVSIEVE_BINARY MODEL.gguf"""
import json
import math
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import harness  # noqa: E402 (tests/serve/harness.py, beside this script)

BIN, MODEL = harness.binary_and_model()
PROMPT = "Once upon a time, there was a little girl"


def events(data):
    """The JSON payloads of a server-sent event stream, [DONE] left out."""
    out = []
    for line in data.decode("utf-8").split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


class OpenAIFields(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = harness.Server(BIN, MODEL, "--alias", "tiny", "--alias", "other-name", "--chat-template", "chatml")

    @classmethod
    def tearDownClass(cls):
        assert cls.s.stop() == 0, cls.s.log

    def post(self, path, body):
        return self.s.json("POST", path, body)

    def completion(self, **extra):
        status, body = self.post("/v1/completions", dict({"prompt": PROMPT, "temperature": 0, "max_tokens": 4}, **extra))
        self.assertEqual(status, 200, body)
        return body

    def assert_error(self, path, body, status, *words):
        got, answer = self.post(path, body)
        self.assertEqual(got, status, answer)
        for w in words:
            self.assertIn(w, answer["error"]["message"])
        return answer

    def test_completion_logprobs_have_the_legacy_shape(self):
        body = self.completion(logprobs=3)
        lp = body["choices"][0]["logprobs"]
        n = body["usage"]["completion_tokens"]
        self.assertEqual([len(lp[k]) for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")], [n] * 4)
        for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            self.assertLessEqual(value, 0)
            self.assertEqual(len(top), 3)
            # Greedy: the sampled token is the most likely one.
            self.assertAlmostEqual(value, max(top.values()), places=6)
            self.assertIn(token, top)
        self.assertEqual(lp["text_offset"][0], 0)
        self.assertEqual("".join(lp["tokens"]), body["choices"][0]["text"])

    def test_echo_gives_the_prompts_logprobs_first_null_and_max_tokens_zero_scores_only(self):
        status, toks = self.post("/tokenize", {"prompt": PROMPT})
        self.assertEqual(status, 200, toks)
        ids = toks["tokens"]
        self.assertEqual(toks["count"], len(ids))
        body = self.completion(prompt=ids, echo=True, logprobs=1, max_tokens=0)
        c = body["choices"][0]
        lp = c["logprobs"]
        self.assertEqual(len(lp["tokens"]), len(ids))
        self.assertIsNone(lp["token_logprobs"][0])
        self.assertIsNone(lp["top_logprobs"][0])
        self.assertTrue(all(v is not None and v <= 0 for v in lp["token_logprobs"][1:]))
        self.assertEqual(body["usage"]["completion_tokens"], 0)
        self.assertEqual(c["finish_reason"], "length")
        status, text = self.post("/detokenize", {"tokens": ids})
        self.assertEqual(c["text"], text["prompt"])
        # The answer's log-probabilities (decode steps) equal the same tokens' as an echoed prompt (prefill rows).
        gen = self.completion(prompt=ids, logprobs=1, max_tokens=3)
        glp = gen["choices"][0]["logprobs"]
        status, more = self.post("/tokenize", {"prompt": "".join(glp["tokens"]), "add_special_tokens": False})
        whole = self.completion(prompt=[ids + more["tokens"]], echo=True, logprobs=1, max_tokens=0)
        wlp = whole["choices"][0]["logprobs"]["token_logprobs"][len(ids):]
        if whole["choices"][0]["logprobs"]["tokens"][len(ids):] == glp["tokens"]:  # the text tokenized back alike
            for a, b in zip(wlp, glp["token_logprobs"]):
                self.assertAlmostEqual(a, b, delta=1e-4)
        # echo without logprobs: the prompt's text, then the answer's.
        plain = self.completion(echo=True, max_tokens=2)
        self.assertTrue(plain["choices"][0]["text"].startswith(PROMPT))
        self.assertIsNone(plain["choices"][0]["logprobs"])

    def test_chat_logprobs_have_the_chat_shape_streamed_and_not(self):
        req = {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "max_tokens": 5, "logprobs": True,
               "top_logprobs": 2}
        status, body = self.post("/v1/chat/completions", req)
        self.assertEqual(status, 200, body)
        content = body["choices"][0]["logprobs"]["content"]
        self.assertGreaterEqual(len(content), 1)
        for t in content:
            self.assertEqual(bytes(t["bytes"]).decode("utf-8", "replace"), t["token"])
            self.assertEqual(len(t["top_logprobs"]), 2)
            self.assertAlmostEqual(t["logprob"], t["top_logprobs"][0]["logprob"], places=6)
        status, _, data = self.s.request("POST", "/v1/chat/completions", dict(req, stream=True))
        self.assertEqual(status, 200)
        streamed = [t for e in events(data) for c in e["choices"] if c.get("logprobs")
                    for t in c["logprobs"]["content"]]
        self.assertEqual([(t["token"], round(t["logprob"], 5)) for t in streamed],
                         [(t["token"], round(t["logprob"], 5)) for t in content])
        # Without logprobs: null.
        status, body = self.post("/v1/chat/completions", dict(req, logprobs=False))
        self.assertIsNone(body["choices"][0]["logprobs"])

    def test_n_choices_are_indexed_and_seeded(self):
        body = self.completion(n=3, temperature=1.0, seed=11, max_tokens=6)
        self.assertEqual([c["index"] for c in body["choices"]], [0, 1, 2])
        again = self.completion(n=3, temperature=1.0, seed=11, max_tokens=6)
        self.assertEqual([c["text"] for c in body["choices"]], [c["text"] for c in again["choices"]])
        self.assertEqual(body["usage"]["completion_tokens"], sum(
            self.completion(temperature=1.0, seed=11 + i, max_tokens=6)["usage"]["completion_tokens"] for i in range(3)))
        # Choice 1 is the single request with seed + 1.
        one = self.completion(temperature=1.0, seed=12, max_tokens=6)
        self.assertEqual(body["choices"][1]["text"], one["choices"][0]["text"])
        status, _, data = self.s.request("POST", "/v1/completions",
                                         {"prompt": PROMPT, "n": 2, "max_tokens": 3, "stream": True, "seed": 3})
        self.assertEqual(status, 200)
        finished = [c["index"] for e in events(data) for c in e["choices"] if c["finish_reason"]]
        self.assertEqual(finished, [0, 1])

    def test_penalties_change_a_greedy_answer_and_zero_changes_nothing(self):
        base = self.completion(max_tokens=24)["choices"][0]["text"]
        self.assertEqual(self.completion(max_tokens=24, presence_penalty=0, frequency_penalty=0)["choices"][0]["text"],
                         base)
        penalised = self.completion(max_tokens=24, frequency_penalty=2, presence_penalty=2)["choices"][0]["text"]
        self.assertNotEqual(penalised, base)

    def test_bad_values_are_one_clear_400(self):
        self.assert_error("/v1/completions", {"prompt": "x", "logprobs": 6}, 400, "'logprobs'", "[0, 5]")
        self.assert_error("/v1/completions", {"prompt": "x", "logprobs": True}, 400, "'logprobs'")
        self.assert_error("/v1/completions", {"prompt": "x", "n": 9}, 400, "'n'", "[1, 8]")
        self.assert_error("/v1/completions", {"prompt": "x", "presence_penalty": 2.5}, 400, "'presence_penalty'")
        self.assert_error("/v1/completions", {"prompt": "x", "frequency_penalty": -3}, 400, "'frequency_penalty'")
        self.assert_error("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "'max_tokens'")
        self.assert_error("/v1/completions", {"prompt": "x", "echo": "yes"}, 400, "'echo'")
        chat = {"messages": [{"role": "user", "content": "Hi"}]}
        self.assert_error("/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=21), 400, "'top_logprobs'")
        self.assert_error("/v1/chat/completions", dict(chat, logprobs=3), 400, "'logprobs'")
        self.assert_error("/v1/chat/completions", dict(chat, echo=True), 400, "'echo'")
        self.assert_error("/detokenize", {"tokens": [-1]}, 400, "'tokens'")

    def test_model_names_are_the_servers_or_its_aliases(self):
        status, body = self.s.json("GET", "/v1/models")
        self.assertEqual(status, 200)
        names = [m["id"] for m in body["data"]]
        self.assertEqual(names, ["tiny", "other-name", "tiny-llama-f32"])
        for name in names:
            self.assertEqual(self.completion(model=name, max_tokens=1)["model"], "tiny")
        answer = self.assert_error("/v1/completions", {"prompt": "x", "model": "gpt-4o"}, 404, "gpt-4o")
        self.assertEqual(answer["error"]["code"], "model_not_found")

    def test_tokenizer_info_names_the_special_tokens(self):
        status, info = self.s.json("GET", "/tokenizer_info")
        self.assertEqual(status, 200)
        self.assertIn("eos_token", info)
        self.assertEqual(info["model_max_length"], 256)
        if info["eos_token"]:
            status, t = self.post("/tokenize", {"prompt": info["eos_token"], "add_special_tokens": False})
            self.assertEqual(len(t["tokens"]), 1)


if __name__ == "__main__":
    unittest.main()
