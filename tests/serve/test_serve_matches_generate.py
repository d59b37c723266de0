"""The same answer through every door (docs/architecture.md, "Where compression happens"): README's demo article and
question, sent to `kvsieve serve` (prompts fed in chunks interleaved with decoding) and given to `kvsieve generate`
(one batch), under the demo's and the leaderboard's learned and heuristic policies on Q8_0-key / Q4_0-value pages (the demo's
policy also on F16 pages), give the same greedy tokens. The article is cut to its first 2,500 characters (587 tokens,
beyond every policy's window), so that the test stays cheap; the server feeds it in its default pieces of 256 tokens,
which the prefill computes as one batch bit for bit (a rest under 32 tokens joins the last piece), so every token
agrees, near-ties included (KVpop on Q8_0/Q4_0 pages answered differently before). Python standard library only.
Usage: test_serve_matches_generate.py KVSIEVE_BINARY SmolLM2.gguf ARTICLE.txt"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import harness  # noqa: E402 (tests/serve/harness.py, beside this script)

BIN, MODEL = harness.binary_and_model()
if len(sys.argv) < 2:
    sys.exit("usage: %s KVSIEVE_BINARY SmolLM2.gguf ARTICLE.txt" % sys.argv[0])
ARTICLE = sys.argv.pop(1)
TOKENS = 16
CTX = 1024
# The learned presets without model= take the predictors shipped for SmolLM2 (KVpop at a capacity of 384 entries per
# KV head, below the prompt's length, so that it drops entries); the heuristic ones are the demo's contrast (SnapKV) and
# a window-exit rule (StreamingLLM).
# Every policy on the demo's Q8_0-key / Q4_0-value pages, the demo's own also on F16 pages (every preset on both page
# types, chunk by chunk against one batch, is PresetChunking.KeepsWhatOneBatchKeepsWhateverThePieces on the tiny
# models).
POLICIES = ["kvzap:tau=-3,sinks=4", "wgkv", "kvpop:capacity=384", "snapkv:ratio=0.5", "streaming_llm:window=64,sinks=4"]
TYPES = [([], POLICIES[:1]), (["--cache-type-k", "q8_0", "--cache-type-v", "q4_0"], POLICIES)]


def prompt_text():
    with open(ARTICLE, encoding="utf-8") as f:
        text = f.read()[:2500]
    return text + "\n\nQuestion: How many homes did the storm damage or destroy?\nAnswer:"


class ServeMatchesGenerate(unittest.TestCase):
    def test_every_policy_and_page_type(self):
        prompt = prompt_text()
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
            f.write(prompt)
            path = f.name
        try:
            for types, policies in TYPES:
                server = harness.Server(BIN, MODEL, *types, ctx=CTX, timeout=600)
                try:
                    for policy in policies:
                        with self.subTest(policy=policy, types=" ".join(types) or "f16"):
                            status, body = server.json("POST", "/v1/completions", {
                                "prompt": prompt, "max_tokens": TOKENS, "temperature": 0, "kv_policy": policy})
                            self.assertEqual(status, 200, body)
                            served = body["choices"][0]["text"]
                            self.assertGreater(body["usage"]["compression_ratio"], 0.0)
                            # generate prints the prompt, then the answer.
                            out = subprocess.run([BIN, "generate", "-m", MODEL, "-f", path, "-n", str(TOKENS),
                                                  "--temp", "0", "-c", str(CTX), "-t", "1", "--policy", policy,
                                                  *types], capture_output=True, check=True).stdout.decode("utf-8")
                            self.assertTrue(out.startswith(prompt), out[:200])
                            self.assertEqual(out[len(prompt):].rstrip("\n"), served)
                finally:
                    server.stop()
        finally:
            os.unlink(path)


if __name__ == "__main__":
    unittest.main()
