"""The workload of scripts/bench-vs-llama-server.sh at its smallest, against `kvsieve serve` alone (llama-server is not
built here): scripts/bench_conversations.py with 3 conversations of ~400 tokens on SmolLM2-135M-Instruct, and a check
of its scoring. Every recorded answer is right exactly when it holds its fact's 7 digits, the fact is in the document
as the question names it, the summary's counts and intervals agree with the turns, and "held" means what it says:
with every conversation kept, each follow-up finds the previous turn in the server's cache; with one kept
conversation and round-robin order, none does. The Poisson order asks each conversation's questions in turn.
Python standard library only. Usage: test_bench_conversations.py KVSIEVE_BINARY MODEL.gguf SCRIPTS_DIR"""
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import harness  # noqa: E402 (tests/serve/harness.py, beside this script)

BIN, MODEL = harness.binary_and_model()
SCRIPTS = sys.argv.pop(1) if len(sys.argv) > 1 else sys.exit("usage: %s KVSIEVE_BINARY MODEL.gguf SCRIPTS_DIR" %
                                                              sys.argv[0])
BENCH = os.path.join(SCRIPTS, "bench_conversations.py")
C = 3


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_conversations", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def corpus(folder):
    """A corpus of prose lines longer than 200 characters (what the workload takes as paragraphs): numbered sentences
    about a harbour, different in every line so that no two documents are the same."""
    path = os.path.join(folder, "corpus.txt")
    with open(path, "w", encoding="utf-8") as f:
        for i in range(60):
            f.write("Line %d of the harbour log. The boats came in at dawn and the fishermen sorted their nets on the "
                    "quay while the gulls circled over the market, and the harbour master wrote the tides and the "
                    "weather of day %d into his book before noon.\n" % (i, i))
    return path


class BenchConversations(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.corpus = corpus(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_bench(self, *server_opts, arrivals="round-robin", concurrency=2):
        s = harness.Server(BIN, MODEL, "--policy", "full", *server_opts, ctx=2048, timeout=300)
        try:
            out = os.path.join(self.tmp.name, "result.json")
            p = subprocess.run([sys.executable, BENCH, "--url", "http://127.0.0.1:%d" % s.port, "--server", "kvsieve",
                                "--conversations", str(C), "--corpus", self.corpus, "--doc-chars", "1200",
                                "--concurrency", str(concurrency), "--max-tokens", "12", "--arrivals", arrivals, "--rate", "20",
                                "--out", out], capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out, encoding="utf-8") as f:
                return json.load(f)
        finally:
            self.assertEqual(s.stop(), 0, s.log)

    def check_scoring(self, r):
        s, turns = r["summary"], r["turns"]
        self.assertEqual(s["requests"], 3 * C)
        self.assertEqual(len(turns), 3 * C)
        self.assertEqual(s["errors"], 0, [t["error"] for t in turns if t["error"]])
        for t in turns:
            self.assertRegex(t["expected"], r"^\d{7}$")
            self.assertEqual(t["right"], t["expected"] in t["answer"], t)
            self.assertGreater(t["prompt_tokens"], 0)
            self.assertGreater(t["ttft_s"], 0)
            self.assertGreaterEqual(t["total_s"], t["ttft_s"])
            self.assertTrue(1 <= t["completion_tokens"] <= 12, t)
        self.assertEqual(s["completion_tokens"], sum(t["completion_tokens"] for t in turns))
        self.assertAlmostEqual(s["generated_tok_per_s"], s["completion_tokens"] / s["wall_s"], delta=0.02)
        for name, q in (("first", lambda t: t["question"] == 0), ("followup", lambda t: t["question"] > 0)):
            rs = [t for t in turns if q(t)]
            right = sum(t["right"] for t in rs)
            self.assertEqual(s[name]["n"], len(rs))
            self.assertAlmostEqual(s[name]["accuracy"], 100 * right / len(rs), places=1)
            lo, hi = s[name]["accuracy_ci95"]
            self.assertLessEqual(lo, s[name]["accuracy"] + 0.05)
            self.assertGreaterEqual(hi, s[name]["accuracy"] - 0.05)
            self.assertLess(hi - lo, 100)
        # Each conversation's turns: questions 0, 1, 2 in that order, each prompt longer than the one before (it
        # carries the earlier turns), "held" recomputed from the cached tokens.
        by_conv = {}
        for t in turns:
            by_conv.setdefault(t["conversation"], []).append(t)
        self.assertEqual(len(by_conv), C)
        for ts in by_conv.values():
            self.assertEqual([t["question"] for t in ts], [0, 1, 2])
            for prev, t in zip(ts, ts[1:]):
                self.assertGreater(t["prompt_tokens"], prev["prompt_tokens"])
                self.assertEqual(t["held"], t["cached_tokens"] >= 0.9 * prev["prompt_tokens"], t)
        self.assertEqual(s["followup"]["held"], sum(t["held"] for t in turns if t["question"] > 0))
        return turns

    def test_documents_hold_the_facts_their_questions_ask(self):
        bench = load_bench()
        convs = bench.make_conversations(C, self.corpus, 1200, 1)
        for c in convs:
            for question, code in zip(c["questions"], c["answers"]):
                color = re.search(r"of the (\w+) locker", question).group(1)
                self.assertEqual(c["document"].count("The access code of the %s locker is %s." % (color, code)), 1)
                self.assertEqual(len(re.findall(r"The access code of the %s locker" % color, c["document"])), 1)
        self.assertEqual(len({c["document"] for c in convs}), C)

    def test_every_kept_conversation_is_held_when_it_comes_back(self):
        r = self.run_bench("--max-conversations", "8")
        turns = self.check_scoring(r)
        self.assertEqual(r["summary"]["followup"]["held"], 2 * C)
        self.assertTrue(all(t["cached_tokens"] == 0 for t in turns if t["question"] == 0))
        self.assertEqual(r["summary"]["arrivals"], "round-robin")
        # The report reads it back as bench-vs-llama-server.sh leaves it (the server's VmHWM added) into its row.
        folder = os.path.join(self.tmp.name, "report")
        os.makedirs(folder)
        r["summary"]["server_vmhwm_mib"] = 123.4
        with open(os.path.join(folder, "kvsieve-full-C%d.json" % C), "w", encoding="utf-8") as f:
            json.dump(r, f)
        p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "vs_llama_server_report.py"), folder],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        row = [ln for ln in p.stdout.splitlines() if ln.startswith("| kvsieve, full F16 cache |")]
        self.assertEqual(len(row), 1, p.stdout)
        cells = [c.strip() for c in row[0].strip("|").split("|")]
        self.assertEqual(cells[1:3], ["round-robin", str(C)])
        self.assertEqual(cells[5], "%d / %d" % (2 * C, 2 * C))
        self.assertEqual(cells[-3], "0")  # errors
        self.assertEqual(cells[-1], "123")

    def test_round_robin_over_one_kept_conversation_holds_none(self):
        # One request at a time, so that each conversation comes back after the two others were kept in its place.
        r = self.run_bench("--max-conversations", "1", concurrency=1)
        self.check_scoring(r)
        self.assertEqual(r["summary"]["followup"]["held"], 0)

    def test_poisson_arrivals_ask_each_conversations_questions_in_turn(self):
        r = self.run_bench("--max-conversations", "8", arrivals="poisson")
        self.check_scoring(r)
        self.assertEqual(r["summary"]["arrivals"], "poisson")
        self.assertEqual(r["summary"]["rate_per_s"], 20)
        self.assertEqual(r["summary"]["followup"]["held"], 2 * C)


if __name__ == "__main__":
    unittest.main()
