"""lm-evaluation-harness through `kvsieve serve`: its `local-completions` model with the server's own tokenizer
(tokenizer_backend=remote: /tokenizer_info, /tokenize, /detokenize; no Hugging Face hub, no torch) runs a
log-likelihood task and a generation task on local data (tests/data/lm_eval: task YAMLs and a few documents), once
with the full cache and once under a compressing policy. Each run's accuracies lie in [0, 1], and every log-likelihood
lm_eval recorded is the sum of the continuation's token log-probabilities a direct /v1/completions echo call gives
(max_tokens 0). The compressing run must score some continuation differently from the full one.
Usage: run_lm_eval.py KVSIEVE_BINARY MODEL.gguf LM_EVAL_VENV TASK_DIR. Exit 77 (skipped) without lm_eval in the venv."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import harness  # noqa: E402 (tests/serve/harness.py, beside this script)

BIN, MODEL = harness.binary_and_model()
VENV, TASKS = sys.argv[1], sys.argv[2]
LM_EVAL = os.path.join(os.path.abspath(VENV), "bin", "lm_eval")
POLICIES = ("full", "streaming_llm:window=8,sinks=2")


def run(policy, out):
    """lm_eval's results and log-likelihood samples against a server running `policy`; checks them against the
    server's own echo answers. Returns {(context, continuation): log-likelihood}."""
    # A compressing policy compresses the prompt after each 4-token chunk, so that its log-likelihoods differ.
    during = () if policy == "full" else ("--compress-during-prefill",)
    s = harness.Server(BIN, MODEL, "--alias", "stories", "--policy", policy, "--prefill-chunk", "4", *during,
                       ctx=512, timeout=60)
    try:
        env = dict(os.environ, HF_HOME=os.path.join(out, "hf"), HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
                   TOKENIZERS_PARALLELISM="false")
        args = ("base_url=http://127.0.0.1:%d/v1/completions,model=stories,tokenizer_backend=remote,"
                "tokenized_requests=True,num_concurrent=1,max_retries=1,max_length=512" % s.port)
        # The task YAMLs name their data relative to their folder: it is the working directory.
        p = subprocess.run([LM_EVAL, "run", "--model", "local-completions", "--model_args", args, "--tasks",
                            "kvsieve_choice,kvsieve_gen", "--include_path", TASKS, "--output_path",
                            os.path.join(out, "results"), "--log_samples"],
                           cwd=TASKS, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, "lm_eval failed (%d):\n%s\n%s" % (p.returncode, p.stdout[-4000:], p.stderr[-4000:])
        [results] = glob.glob(os.path.join(out, "results", "*", "results_*.json"))
        r = json.load(open(results))["results"]
        acc, em = r["kvsieve_choice"]["acc,none"], r["kvsieve_gen"]["exact_match,none"]
        assert 0 <= acc <= 1 and 0 <= em <= 1, r
        [samples] = glob.glob(os.path.join(out, "results", "*", "samples_kvsieve_choice_*.jsonl"))
        scores = {}
        for line in open(samples):
            doc = json.loads(line)
            for key, resp in zip(sorted(doc["arguments"]), doc["resps"]):
                context, continuation = doc["arguments"][key]["arg_0"], doc["arguments"][key]["arg_1"]
                ll = float(resp[0][0])
                # As lm_eval splits the pair: the whole text's tokens, the context's first.
                whole = s.json("POST", "/tokenize", {"prompt": context + continuation, "add_special_tokens": False})
                ctx = s.json("POST", "/tokenize", {"prompt": context, "add_special_tokens": False})
                whole, n_ctx = whole[1]["tokens"], len(ctx[1]["tokens"])
                status, echo = s.json("POST", "/v1/completions", {"model": "stories", "prompt": whole, "echo": True,
                                                                  "logprobs": 1, "max_tokens": 0})
                assert status == 200, echo
                direct = sum(echo["choices"][0]["logprobs"]["token_logprobs"][n_ctx:])
                assert abs(direct - ll) <= 1e-6 * max(1.0, abs(ll)), (policy, context, continuation, direct, ll)
                scores[(context, continuation)] = ll
        print("%s: acc %.2f, exact_match %.2f, %d log-likelihoods match the direct echo call" %
              (policy, acc, em, len(scores)))
        return scores
    finally:
        assert s.stop() == 0, s.log


def main():
    if not os.access(LM_EVAL, os.X_OK):
        print("skipped: lm_eval is not installed in %s (scripts/install-test-tools.sh installs it)" % VENV)
        return 77
    out = tempfile.mkdtemp(prefix="kvsieve-lm-eval-")
    try:
        full = run(POLICIES[0], os.path.join(out, "full"))
        compressed = run(POLICIES[1], os.path.join(out, "compressed"))
        assert full.keys() == compressed.keys()
        assert any(abs(full[k] - compressed[k]) > 1e-6 for k in full), "the policy changed no log-likelihood"
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
