"""Runs scripts/loadtest.py against a server and checks that the run saw what it was built to see: requests refused
with 503 because the pool was full, planned cancellations, and otherwise normal ends; loadtest.py itself fails when
a request was lost or the server was not healthy afterwards.
Usage: run_loadtest.py LOADTEST_PY BASE_URL"""
import json
import subprocess
import sys
import tempfile

loadtest, url = sys.argv[1], sys.argv[2]
with tempfile.NamedTemporaryFile(suffix=".json") as out:
    rc = subprocess.call([sys.executable, loadtest, "--url", url, "--clients", "8", "--requests", "20",
                          "--prompt-words", "250", "--max-tokens", "40", "--cancel-every", "3", "--json", out.name])
    s = json.load(open(out.name))
print(json.dumps(s, indent=2))
assert rc == 0, "loadtest.py failed"
assert s["lost"] == 0 and s["errors"] == 0, s
# Every 3rd stream to reach its second token disconnects there, so a run with 3 or more admitted streams cancels.
assert s["cancelled"] >= 1 and s["server_cancelled"] >= 1, s
assert s["refused_503"] >= 1, "the pool was never exhausted; the test no longer tests exhaustion"
assert s["ok"] + s["cancelled"] >= 3, s
assert s["ok"] + s["refused_503"] + s["cancelled"] == 20, s
assert s["healthy_after"], s
print("load test: OK")
