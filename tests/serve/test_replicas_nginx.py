"""Two replicas of `kvsieve serve` behind nginx (docs/serving.md, "Replicas behind nginx"): they share one --cache-dir,
nginx sends each API key to one replica (hash on the Authorization header) and streams server-sent events unbuffered.
A conversation held by one replica is saved there and continued on the other, which restores the saved file and must
answer exactly as the first one does. Python standard library only; nginx runs from a temporary
prefix (configuration, pid file, logs and temporary folders inside it; no root needed). Exits 77 (skipped) without nginx
($KVSIEVE_NGINX names another binary).
Usage: test_replicas_nginx.py KVSIEVE_BINARY MODEL.gguf"""
import http.client
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import harness  # noqa: E402 (tests/serve/harness.py, beside this script)
from harness import free_port, wait_for  # noqa: E402

BIN, MODEL = harness.binary_and_model()
TIMEOUT = 60  # seconds for one request
KEY = "replica-test-key-0123456789"
# The nginx binary: $KVSIEVE_NGINX when set (a path that is not executable: none), else nginx on PATH or in sbin.
NGINX = (os.environ["KVSIEVE_NGINX"] if os.access(os.environ["KVSIEVE_NGINX"], os.X_OK) else None) \
    if "KVSIEVE_NGINX" in os.environ else \
    shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None)


def call(port, method, path, body=None, key=KEY):
    """(status, parsed JSON or raw text) of one request to 127.0.0.1:port, with `key` as its bearer token."""
    status, _, data = harness.request(port, method, path, body,
                                      {"Authorization": "Bearer " + key} if key else {}, timeout=TIMEOUT)
    raw = data.decode("utf-8")
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


NGINX_CONF = """
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    log_format replica '$request_method $uri $status $upstream_addr';
    access_log {dir}/access.log replica;
    upstream kvsieve {{
        hash $http_authorization consistent;
        server 127.0.0.1:{a} max_fails=2 fail_timeout=10s;
        server 127.0.0.1:{b} max_fails=2 fail_timeout=10s;
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 8m;
        location / {{
            proxy_pass http://kvsieve;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host localhost;
            proxy_buffering off;
            proxy_read_timeout 3600s;
        }}
    }}
}}
"""


@unittest.skipIf(NGINX is None, "nginx is not installed (apt-get install nginx-light; scripts/install-deps.sh does)")
class ReplicasBehindNginx(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvsieve_replicas_")
        os.chmod(cls.dir, 0o755)  # nginx's workers run as another user when started by root
        cls.cache = os.path.join(cls.dir, "cache")
        os.mkdir(cls.cache)
        cls.replicas = []
        for _ in range(2):
            cls.replicas.append(harness.Server(BIN, MODEL, "--api-key", KEY, "--cache-dir", cls.cache, "--metrics",
                                               ctx=2048, timeout=TIMEOUT))
        cls.ports = [r.port for r in cls.replicas]
        cls.port = free_port()
        conf = os.path.join(cls.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(dir=cls.dir, a=cls.ports[0], b=cls.ports[1], port=cls.port))
        cls.nginx = harness.Process([NGINX, "-p", cls.dir, "-c", conf, "-e", os.path.join(cls.dir, "error.log"),
                             "-g", "daemon off;"])

        def up():
            try:
                return call(cls.port, "GET", "/health", key=None)[0] == 200
            except OSError:
                return cls.nginx.proc.poll() is not None
        wait_for(up, "nginx did not start")
        assert cls.nginx.proc.poll() is None, "nginx exited:\n" + cls.nginx.log

    @classmethod
    def tearDownClass(cls):
        if hasattr(cls, "nginx"):
            cls.nginx.stop()
        codes = [r.stop() for r in getattr(cls, "replicas", [])]
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert codes == [0, 0], "a replica did not stop cleanly: %s" % codes

    def replica_of(self, conversation):
        """Index of the replica that keeps `conversation` (asked directly), or None."""
        held = [i for i, p in enumerate(self.ports)
                if conversation in [c["id"] for c in call(p, "GET", "/v1/cache/conversations")[1]["data"]]]
        self.assertLessEqual(len(held), 1)
        return held[0] if held else None

    def upstreams(self):
        with open(os.path.join(self.dir, "access.log")) as f:
            return [line.split()[-1] for line in f if line.strip()]

    def test_a_conversation_saved_on_one_replica_continues_on_the_other(self):
        prompt = "Once upon a time there was a little cat"
        first = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "conversation": "story"}
        status, r1 = call(self.port, "POST", "/v1/completions", first)
        self.assertEqual(status, 200, r1)
        a = self.replica_of("story")
        self.assertIsNotNone(a, "no replica keeps the conversation")
        b = 1 - a
        # The key's requests all go to replica A: saved there, into the shared folder (the key's owner folder).
        status, saved = call(self.port, "POST", "/v1/cache/save", {"name": "story", "conversation": "story"})
        self.assertEqual(status, 200, saved)
        self.assertGreater(saved["tokens"], 0)
        self.assertEqual(set(self.upstreams()[-2:]), {"127.0.0.1:%d" % self.ports[a]})
        files = [os.path.join(d, f) for d, _, fs in os.walk(self.cache) for f in fs if f == "story.kvseq"]
        self.assertEqual(len(files), 1, files)
        # Replica B, asked directly (as after A's failure or a change of the affinity key), restores it.
        self.assertEqual(self.replica_of("story"), a)  # B does not hold it yet
        status, restored = call(self.ports[b], "POST", "/v1/cache/restore", {"name": "story", "conversation": "story"})
        self.assertEqual(status, 200, restored)
        self.assertEqual(restored["tokens"], saved["tokens"])
        nxt = dict(first, prompt=prompt + " and")
        status, on_b = call(self.ports[b], "POST", "/v1/completions", nxt)
        self.assertEqual(status, 200, on_b)
        # The same turn on A, which kept the conversation in memory, is the reference.
        status, on_a = call(self.ports[a], "POST", "/v1/completions", nxt)
        self.assertEqual(status, 200, on_a)
        cached_b = on_b["usage"]["prompt_tokens_details"]["cached_tokens"]
        self.assertGreater(cached_b, 0)
        self.assertEqual(cached_b, on_a["usage"]["prompt_tokens_details"]["cached_tokens"])
        self.assertEqual(on_b["choices"][0]["text"], on_a["choices"][0]["text"])
        self.assertEqual(on_b["usage"]["completion_tokens"], on_a["usage"]["completion_tokens"])

    def test_events_stream_through_nginx_unbuffered(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            conn.request("POST", "/v1/completions",
                         json.dumps({"prompt": "Hello", "max_tokens": 6, "temperature": 0, "stream": True}),
                         {"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            self.assertIn("text/event-stream", r.getheader("Content-Type"))
            events = [l[6:] for l in r.read().decode().split("\n") if l.startswith("data: ")]
        finally:
            conn.close()
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(json.loads(events[-2])["choices"][0]["finish_reason"], "length")

    def metric(self, name):
        """`name` summed over both replicas' /metrics."""
        total = 0.0
        for p in self.ports:
            status, text = call(p, "GET", "/metrics")
            self.assertEqual(status, 200)
            total += float(re.search(r"^%s (\S+)$" % re.escape(name), text, re.M).group(1))
        return total

    def test_a_client_leaving_nginx_cancels_its_request_on_the_replica(self):
        max_tokens = 1000
        body = json.dumps({"prompt": [1] + [(7 * i) % 400 + 20 for i in range(1500)], "max_tokens": max_tokens,
                           "temperature": 0}).encode()
        cancelled0, generated0 = self.metric("kvsieve_requests_cancelled_total"), self.metric("kvsieve_generated_tokens_total")
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        wait_for(lambda: self.metric("kvsieve_requests_running") >= 1, "the request did not start", 30)
        sock.close()
        wait_for(lambda: self.metric("kvsieve_requests_cancelled_total") > cancelled0
                 and self.metric("kvsieve_requests_running") == 0, "the request was not cancelled", 10)
        self.assertEqual(self.metric("kvsieve_requests_cancelled_total"), cancelled0 + 1)
        self.assertLess(self.metric("kvsieve_generated_tokens_total") - generated0, max_tokens / 10)

    def test_health_and_keys_pass_through(self):
        self.assertEqual(call(self.port, "GET", "/ready", key=None), (200, {"status": "ready"}))
        self.assertEqual(call(self.port, "GET", "/v1/models", key="wrong")[0], 401)


if __name__ == "__main__":
    if NGINX is None:
        print("SKIPPED: nginx is not installed (apt-get install nginx-light; scripts/install-deps.sh installs it)")
        sys.exit(77)
    unittest.main(verbosity=2)
