"""Hostile clients against `kvsieve serve` on loopback: every probe gets a bounded, well-formed answer and the server
stays up (/health 200 after each). Python standard library only; every loop is bounded in count and time.
Usage: test_hostile_clients.py KVSIEVE_BINARY MODEL.gguf"""
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import harness  # noqa: E402 (tests/serve/harness.py, beside this script)

BIN, MODEL = harness.binary_and_model()
TIMEOUT = 30  # seconds for one request


def Server(*opts, host="127.0.0.1", ctx=256):
    """`kvsieve serve` of the test's binary and model on a free loopback port with extra options (harness.Server):
    stopped (SIGTERM) by stop()."""
    return harness.Server(BIN, MODEL, *opts, host=host, ctx=ctx, timeout=TIMEOUT)


def completion(prompt="Hello", **extra):
    return dict({"prompt": prompt, "max_tokens": 2, "temperature": 0}, **extra)


class SharedServerCase(unittest.TestCase):
    """One server for the whole class (set as cls.s by setUpClass, with an optional scratch folder cls.dir): alive
    after every probe, stopped cleanly (status 0) at the end, its folder removed."""
    dir = None

    @classmethod
    def tearDownClass(cls):
        rc = cls.s.stop()
        if cls.dir:
            shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, "the server did not stop cleanly (status %s):\n%s" % (rc, cls.s.log)

    def tearDown(self):
        self.assertTrue(self.s.alive(), "the server is down after the probe:\n" + self.s.log)


class HostileClients(SharedServerCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server("--metrics")

    def test_non_utf8_path_is_a_json_404(self):
        status, body = self.s.json("GET", "/%FF")
        self.assertEqual(status, 404)
        self.assertIn("no endpoint", body["error"]["message"])
        self.assertIn("\ufffd", body["error"]["message"])
        # The byte itself, not percent-encoded.
        out = self.s.raw(b"GET /\xff\xfe HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 404") or out.startswith(b"HTTP/1.1 400"), out[:100])

    def test_long_path_is_quoted_bounded(self):
        status, body = self.s.json("GET", "/" + "x" * 4000)
        self.assertEqual(status, 404)
        self.assertLess(len(body["error"]["message"]), 400)

    def test_deep_json_is_a_400(self):
        n = 100000
        body = b'{"prompt":"Hi","temperature":' + b"[" * n + b"]" * n + b"}"
        status, _, data = self.s.request("POST", "/v1/completions", raw_body=body,
                                         headers={"Content-Type": "application/json"})
        self.assertEqual(status, 400)
        self.assertIn("deeper than 64", json.loads(data)["error"]["message"])
        # A shallow but wrong value is quoted by its kind, not dumped.
        status, body = self.s.json("POST", "/v1/completions", completion(temperature=[[1]] * 1000))
        self.assertEqual(status, 400)
        self.assertIn("an array of 1000 elements", body["error"]["message"])
        status, body = self.s.json("POST", "/v1/cache/save", raw_body=b"[" * n,
                                   headers={"Content-Type": "application/json"})
        self.assertEqual(status, 400)

    def test_distinct_404_paths_do_not_grow_metrics(self):
        self.s.request("GET", "/warm-up-404")
        status, _, before = self.s.request("GET", "/metrics")
        self.assertEqual(status, 200)
        for i in range(300):
            self.assertEqual(self.s.request("GET", "/probe-%d-%s" % (i, "y" * (i % 50)))[0], 404)
        for i in range(50):
            self.s.request("DELETE", "/v1/cache/conversations/c%d" % i)
        _, _, after = self.s.request("GET", "/metrics")
        self.assertLess(len(after) - len(before), 2048, after.decode()[-3000:])
        self.assertIn(b'endpoint="other",status="404"', after)
        self.assertNotIn(b"probe-", after)

    def test_post_without_json_content_type_is_a_415(self):
        data = json.dumps(completion()).encode()
        for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": ctype} if ctype else {}
            status, _, body = self.s.request("POST", "/v1/completions", raw_body=data, headers=headers)
            self.assertEqual(status, 415, ctype)
            self.assertIn("application/json", json.loads(body)["error"]["message"])
        status, _, _ = self.s.request("POST", "/v1/completions", raw_body=data,
                                      headers={"Content-Type": "application/json; charset=utf-8"})
        self.assertEqual(status, 200)

    def test_foreign_origin_is_a_403(self):
        status, body = self.s.json("POST", "/v1/completions", completion(), headers={"Origin": "https://evil.example"})
        self.assertEqual(status, 403)
        self.assertIn("origin", body["error"]["message"])
        self.assertEqual(self.s.request("GET", "/health", headers={"Origin": "http://127.0.0.1:1"})[0], 403)

    def test_the_served_openapi_document_is_the_committed_one_and_every_route_answers(self):
        status, hdrs, data = self.s.request("GET", "/openapi.json")
        self.assertEqual(status, 200)
        self.assertTrue(hdrs.get("Content-Type", "").startswith("application/json"), hdrs)
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "openapi.json"), "rb") as f:
            self.assertEqual(data, f.read())
        doc = json.loads(data)
        for path, item in doc["paths"].items():
            for method in item:
                concrete = path.replace("{id}", "no-such-id")
                body = {} if method == "post" else None
                status, hdrs, answer = self.s.request(method.upper(), concrete, body)
                self.assertIn(str(status), item[method]["responses"], (method, path, answer[:200]))
                ctype = hdrs.get("Content-Type", "").split(";")[0]
                self.assertIn(ctype, item[method]["responses"].get(str(status), {}).get("content", {"application/json": 0}))
                if status == 404:  # the route exists: its own 404, not the router's
                    self.assertNotIn("no endpoint", json.loads(answer)["error"]["message"], (method, path))

    def test_bad_host_header_is_a_403(self):
        for host in ("evil.example", "evil.example:8080", "127.0.0.1.evil.example"):
            status, body = self.s.json("GET", "/v1/models", headers={"Host": host})
            self.assertEqual(status, 403, host)
            self.assertIn("Host", body["error"]["message"])
        self.assertEqual(self.s.request("GET", "/v1/models", headers={"Host": "localhost:%d" % self.s.port})[0], 200)


class AllowedOrigins(unittest.TestCase):
    def test_an_allowed_origin_gets_cors_headers_and_others_403(self):
        s = Server("--allowed-origins", "https://app.example, http://localhost:3000")
        try:
            status, hdrs, _ = s.request("POST", "/v1/completions", completion(), headers={"Origin": "https://app.example"})
            self.assertEqual(status, 200)
            self.assertEqual(hdrs.get("Access-Control-Allow-Origin"), "https://app.example")
            status, hdrs, _ = s.request("OPTIONS", "/v1/completions", headers={"Origin": "http://localhost:3000"})
            self.assertEqual(status, 204)
            self.assertIn("Authorization", hdrs.get("Access-Control-Allow-Headers", ""))
            self.assertEqual(s.request("POST", "/v1/completions", completion(), headers={"Origin": "https://app.example.evil"})[0], 403)
            self.assertTrue(s.alive())
        finally:
            self.assertEqual(s.stop(), 0, s.log)


class KeysAndOwnership(SharedServerCase):
    A, B = "key-alpha-0123456789", "key-beta-9876543210"

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvsieve_keys_")
        cls.s = Server("--api-key", cls.A, "--api-key", cls.B, "--cache-dir", cls.dir, "--metrics")

    def as_(self, key, method, path, body=None):
        return self.s.json(method, path, body, headers={"Authorization": "Bearer " + key})

    def test_no_key_or_a_wrong_key_is_a_401(self):
        for method, path, body in (("POST", "/v1/completions", completion()), ("GET", "/v1/models", None),
                                   ("GET", "/v1/cache/conversations", None), ("GET", "/metrics", None),
                                   ("POST", "/v1/cache/save", {"name": "x", "conversation": "x"}),
                                   ("DELETE", "/v1/cache/conversations/x", None)):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": self.A},
                            {"Authorization": "Bearer " + self.A + "x"}):
                status, b = self.s.json(method, path, body, headers=headers)
                self.assertEqual(status, 401, (method, path, headers))
                self.assertIn("API key", b["error"]["message"])
        self.assertEqual(self.s.request("GET", "/health")[0], 200)
        self.assertEqual(self.as_(self.A, "GET", "/v1/models")[0], 200)
        status, _, text = self.s.request("GET", "/metrics", headers={"Authorization": "Bearer " + self.B})
        self.assertEqual(status, 200)
        self.assertIn(b"kvsieve_slots", text)

    def test_each_key_sees_only_its_own_conversations_and_files(self):
        prompt = "Once upon a time there was a little cat"
        status, a1 = self.as_(self.A, "POST", "/v1/completions", completion(prompt, conversation="shared"))
        self.assertEqual(status, 200, a1)
        ids = lambda key: [c["id"] for c in self.as_(key, "GET", "/v1/cache/conversations")[1]["data"]]
        self.assertIn("shared", ids(self.A))
        self.assertNotIn("shared", ids(self.B))
        # B cannot save, restore into, or delete A's conversation.
        self.assertEqual(self.as_(self.B, "POST", "/v1/cache/save", {"name": "b1", "conversation": "shared"})[0], 404)
        self.assertEqual(self.as_(self.B, "DELETE", "/v1/cache/conversations/shared")[0], 404)
        self.assertIn("shared", ids(self.A))
        # A saves it; the file is A's: B can neither restore it nor start from it.
        status, saved = self.as_(self.A, "POST", "/v1/cache/save", {"name": "s1", "conversation": "shared"})
        self.assertEqual(status, 200, saved)
        self.assertEqual(saved["conversation"], "shared")
        self.assertEqual(self.as_(self.B, "POST", "/v1/cache/restore", {"name": "s1", "conversation": "mine"})[0], 404)
        self.assertEqual(self.as_(self.B, "POST", "/v1/completions", completion(prompt, cache_restore="s1"))[0], 404)
        self.assertEqual(self.as_(self.A, "POST", "/v1/completions", completion(prompt, cache_restore="s1"))[0], 200)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "s1.kvseq")))
        owner_dirs = [d for d in os.listdir(self.dir) if os.path.isdir(os.path.join(self.dir, d))]
        self.assertTrue(any(os.path.exists(os.path.join(self.dir, d, "s1.kvseq")) for d in owner_dirs), owner_dirs)
        # B continuing "shared" with the same prompt starts its own conversation: nothing of A's is reused.
        status, b1 = self.as_(self.B, "POST", "/v1/completions", completion(prompt + " and", conversation="shared"))
        self.assertEqual(status, 200, b1)
        self.assertEqual(b1["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertIn("shared", ids(self.B))
        # A's next turn reuses A's own cache.
        status, a2 = self.as_(self.A, "POST", "/v1/completions", completion(prompt + " and", conversation="shared"))
        self.assertEqual(status, 200, a2)
        self.assertGreater(a2["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        # B deleting its "shared" leaves A's.
        self.assertEqual(self.as_(self.B, "DELETE", "/v1/cache/conversations/shared")[0], 200)
        self.assertNotIn("shared", ids(self.B))
        self.assertIn("shared", ids(self.A))


class KeyFileReload(unittest.TestCase):
    def test_sighup_rereads_the_key_file(self):
        d = tempfile.mkdtemp(prefix="kvsieve_keyfile_")
        path = os.path.join(d, "keys")
        with open(path, "w") as f:
            f.write("# keys\nold-key-1\n\n")
        s = Server("--api-key-file", path)
        try:
            auth = lambda k: s.request("GET", "/v1/models", headers={"Authorization": "Bearer " + k})[0]
            self.assertEqual(auth("old-key-1"), 200)
            self.assertEqual(auth("new-key-2"), 401)
            with open(path, "w") as f:
                f.write("new-key-2\n")
            s.proc.send_signal(1)  # SIGHUP
            for _ in range(100):
                if auth("new-key-2") == 200:
                    break
                time.sleep(0.05)
            self.assertEqual(auth("new-key-2"), 200)
            self.assertEqual(auth("old-key-1"), 401)
            self.assertEqual(s.request("GET", "/v1/models")[0], 401)
            self.assertTrue(s.alive())
        finally:
            self.assertEqual(s.stop(), 0, s.log)
            shutil.rmtree(d, ignore_errors=True)


class Limits(SharedServerCase):
    """--timeout and --max-requests-per-key (1900 tokens of the tiny model take about 2 s here)."""
    LONG = {"prompt": "Hello there", "max_tokens": 1900, "temperature": 0}

    @classmethod
    def setUpClass(cls):
        cls.s = Server("--timeout", "0.3", "--max-requests-per-key", "1", ctx=2048)

    def test_a_request_past_the_timeout_is_a_504(self):
        t0 = time.monotonic()
        status, body = self.s.json("POST", "/v1/completions", self.LONG)
        self.assertEqual(status, 504, body)
        self.assertIn("--timeout", body["error"]["message"])
        self.assertLess(time.monotonic() - t0, 10)

    def test_a_stream_past_the_timeout_ends_with_an_error_event(self):
        status, _, data = self.s.request("POST", "/v1/completions", dict(self.LONG, stream=True))
        self.assertEqual(status, 200)
        events = [line[6:] for line in data.decode().split("\n") if line.startswith("data: ")]
        self.assertGreater(len(events), 1)
        self.assertNotIn("[DONE]", events, "the stream ran to its end within the timeout")
        self.assertEqual(json.loads(events[-1])["error"]["status"], 504)
        self.assertEqual(json.loads(events[-1])["error"]["code"], "timeout")

    def test_one_request_more_than_the_key_may_run_is_a_429(self):
        # A place is given back just after the last byte of its response is sent: an earlier test's may lag a little.
        for _ in range(50):
            conn = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=TIMEOUT)
            conn.request("POST", "/v1/completions", json.dumps(dict(self.LONG, stream=True)),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()  # its first event came: the request runs
            if r.status != 429:
                break
            r.read()
            conn.close()
            time.sleep(0.05)
        try:
            self.assertEqual(r.status, 200)
            status, body = self.s.json("POST", "/v1/completions", completion())
            self.assertEqual(status, 429, body)
            self.assertIn("--max-requests-per-key", body["error"]["message"])
            r.read()  # the stream ends (its timeout)
        finally:
            conn.close()
        for _ in range(50):  # its place is given back once the stream's response is done
            status, body = self.s.json("POST", "/v1/completions", completion())
            if status != 429:
                break
            time.sleep(0.05)
        self.assertEqual(status, 200, body)


class FairSharing(SharedServerCase):
    """Two keys share the server: one key's new conversations evict only its own, and by default one key cannot take
    every slot and the whole queue (--max-requests-per-key: --slots 2 plus half of --max-queue 2 = 3)."""
    A, B = "key-fair-a-0123456789", "key-fair-b-9876543210"
    LONG = {"prompt": "Hello there", "max_tokens": 8000, "temperature": 0, "stream": True}

    @classmethod
    def setUpClass(cls):
        cls.s = Server("--api-key", cls.A, "--api-key", cls.B, "--max-conversations", "4", "--max-queue", "2",
                       ctx=8192)

    def as_(self, key, method, path, body=None):
        return self.s.json(method, path, body, headers={"Authorization": "Bearer " + key})

    def test_one_keys_new_conversations_do_not_evict_anothers(self):
        self.assertEqual(self.as_(self.A, "POST", "/v1/completions", completion(conversation="mine"))[0], 200)
        for i in range(6):
            status, body = self.as_(self.B, "POST", "/v1/completions", completion(conversation="b%d" % i))
            self.assertEqual(status, 200, body)
        status, body = self.as_(self.A, "GET", "/v1/cache/conversations")
        self.assertEqual(status, 200, body)
        self.assertEqual([c["id"] for c in body["data"]], ["mine"])
        status, body = self.as_(self.B, "GET", "/v1/cache/conversations")
        self.assertEqual(sorted(c["id"] for c in body["data"]), ["b3", "b4", "b5"])

    def test_by_default_one_key_cannot_take_every_place(self):
        conns = []
        try:
            def send_long():
                conn = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=TIMEOUT)
                conn.request("POST", "/v1/completions", json.dumps(self.LONG),
                             {"Content-Type": "application/json", "Authorization": "Bearer " + self.A})
                conns.append(conn)
            # Two run, one waits: the key's three places. The third is sent once both slots run (its first events
            # came), so that it cannot overtake one of the first two on its way through the connection threads.
            send_long()
            send_long()
            for conn in conns[:2]:
                self.assertEqual(conn.getresponse().status, 200)
            send_long()
            time.sleep(0.2)  # the third has taken its place in the queue (the first two run for seconds)
            status, body = self.as_(self.A, "POST", "/v1/completions", completion())
            self.assertEqual(status, 429, body)
            self.assertIn("--max-requests-per-key", body["error"]["message"])
            # The other key still gets a place and an answer (that it gets the next free slot before the first key's
            # third request is Scheduler.FreeSlotsGoToTheOwnerRunningTheFewest).
            waiting = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=TIMEOUT)
            waiting.request("POST", "/v1/completions", json.dumps(completion()),
                            {"Content-Type": "application/json", "Authorization": "Bearer " + self.B})
            conns.append(waiting)
            conns[0].close()  # the first key's first stream goes: its slot frees
            r = waiting.getresponse()
            self.assertEqual(r.status, 200)
            json.loads(r.read())
        finally:
            for conn in conns:
                conn.close()


class ClientDisconnects(SharedServerCase):
    """A client that closes its connection cancels its request, streamed or not, during prefill and decoding: the
    request leaves its slot long before max_tokens instead of running to its end."""
    MAX_TOKENS = 1000
    BODY = {"prompt": [1] + [(7 * i) % 400 + 20 for i in range(1500)], "max_tokens": MAX_TOKENS, "temperature": 0}

    @classmethod
    def setUpClass(cls):
        cls.s = Server("--metrics", ctx=2048)

    def metric(self, text, name):
        m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
        self.assertIsNotNone(m, name)
        return float(m.group(1))

    def metrics(self):
        status, _, text = self.s.request("GET", "/metrics")
        self.assertEqual(status, 200)
        return text.decode()

    def poll(self, cond, seconds=10):
        """Waits (bounded) until cond(metrics text) holds; the last text."""
        deadline = time.monotonic() + seconds
        while True:
            text = self.metrics()
            if cond(text) or time.monotonic() > deadline:
                return text
            time.sleep(0.02)

    def close_during(self, stream, phase):
        before = self.metrics()
        closed = 'kvsieve_http_requests_total{endpoint="/v1/completions",status="499"}'
        closed0 = self.metric(before, closed) if closed in before else 0
        cancelled0 = self.metric(before, "kvsieve_requests_cancelled_total")
        generated0 = self.metric(before, "kvsieve_generated_tokens_total")
        data = json.dumps(dict(self.BODY, stream=stream)).encode()
        sock = socket.create_connection(("127.0.0.1", self.s.port), timeout=TIMEOUT)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(data) + data)
        running = lambda t: self.metric(t, "kvsieve_requests_running") >= 1
        if phase == "decode":
            started = lambda t: running(t) and self.metric(t, "kvsieve_generated_tokens_total") >= generated0 + 3
        else:
            started = running
        at_close = self.poll(started)
        self.assertTrue(started(at_close), "the request did not reach its %s" % phase)
        if phase == "prefill":  # 1500 prompt tokens take several steps of 256
            self.assertEqual(self.metric(at_close, "kvsieve_generated_tokens_total"), generated0)
        sock.close()
        after = self.poll(lambda t: self.metric(t, "kvsieve_requests_cancelled_total") > cancelled0
                          and self.metric(t, "kvsieve_requests_running") == 0 and closed in t
                          and self.metric(t, closed) > closed0)
        self.assertEqual(self.metric(after, "kvsieve_requests_cancelled_total"), cancelled0 + 1, after)
        self.assertEqual(self.metric(after, "kvsieve_requests_running"), 0)
        generated = self.metric(after, "kvsieve_generated_tokens_total") - generated0
        # The server polls the client's socket every 100 ms and the tiny model decodes thousands of tokens a second,
        # so some tokens follow the close, more on a loaded machine; a request that ran on would reach MAX_TOKENS.
        self.assertLess(generated, self.MAX_TOKENS / 2, "the request ran on after its client left")
        self.assertEqual(self.metric(after, "kvsieve_kv_pool_pages_in_use"), 0)  # no conversation kept: all freed
        self.assertEqual(self.metric(after, closed), closed0 + 1, "the cancelled request is not logged as 499")

    def test_a_non_streamed_request_is_cancelled_during_prefill(self):
        self.close_during(False, "prefill")

    def test_a_non_streamed_request_is_cancelled_during_decoding(self):
        self.close_during(False, "decode")

    def test_a_streamed_request_is_cancelled_during_prefill(self):
        self.close_during(True, "prefill")

    def test_a_streamed_request_is_cancelled_during_decoding(self):
        self.close_during(True, "decode")


class HalfSentConnections(unittest.TestCase):
    """80 connections that send half a request and wait hold one connection thread each (httplib runs a connection
    on one thread): /health still answers under --max-connections, and the server closes them after --read-timeout."""

    def test_health_answers_and_half_sent_connections_are_closed(self):
        s = Server("--read-timeout", "2")
        socks = []
        try:
            for _ in range(80):
                c = socket.create_connection(("127.0.0.1", s.port), timeout=TIMEOUT)
                c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
                socks.append(c)
            self.assertEqual(s.request("GET", "/health")[0], 200)
            closed = 0
            for c in socks:  # each gets httplib's 400 for the cut request, then the server closes it
                data = b""
                while True:
                    chunk = c.recv(4096)  # bounded by TIMEOUT: a socket the server left open fails the test
                    if not chunk:
                        break
                    data += chunk
                self.assertTrue(data == b"" or data.startswith(b"HTTP/1.1 4"), data[:80])
                closed += 1
            self.assertEqual(closed, 80)
            self.assertTrue(s.alive())
        finally:
            for c in socks:
                c.close()
            self.assertEqual(s.stop(), 0, s.log)

    def test_bad_limits_are_refused_by_name(self):
        for opt, value in (("--max-connections", "0"), ("--read-timeout", "0")):
            p = subprocess.run([BIN, "serve", "-m", MODEL, "--port", "0", opt, value], capture_output=True, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(opt.encode(), p.stderr)


class NeverFits(unittest.TestCase):
    def test_a_request_larger_than_the_whole_pool_is_a_413(self):
        s = Server("--kv-pool-mb", "0.05", "--max-conversations", "4")  # 25 pages of 2 KiB
        try:
            status, body = s.json("POST", "/v1/completions", completion(conversation="kept"))
            self.assertEqual(status, 200, body)
            status, body = s.json("POST", "/v1/completions", completion(max_tokens=200))
            self.assertEqual(status, 413, body)
            self.assertIn("can never fit", body["error"]["message"])
            # The kept conversation was not dropped for it.
            _, conv = s.json("GET", "/v1/cache/conversations")
            self.assertEqual([c["id"] for c in conv["data"]], ["kept"])
            self.assertTrue(s.alive())
        finally:
            self.assertEqual(s.stop(), 0, s.log)


class GracefulShutdown(unittest.TestCase):
    """SIGTERM with --shutdown-grace: running requests finish, new ones get 503, /ready says so."""
    LONG = {"prompt": "Hello there", "max_tokens": 1500, "temperature": 0, "stream": True}

    def run_stream_through_sigterm(self, grace):
        s = Server("--shutdown-grace", grace, ctx=2048)
        try:
            self.assertEqual(s.json("GET", "/ready"), (200, {"status": "ready"}))
            conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=TIMEOUT)
            conn.request("POST", "/v1/completions", json.dumps(self.LONG), {"Content-Type": "application/json"})
            r = conn.getresponse()  # the first event came: the request runs
            self.assertEqual(r.status, 200)
            s.proc.send_signal(15)
            status, body = None, None
            for _ in range(100):  # the signal is seen within a few steps
                status, body = s.json("GET", "/ready")
                if status == 503:
                    break
                time.sleep(0.01)
            self.assertEqual(status, 503, body)
            self.assertIn("shutting down", body["reason"])
            status, body = s.json("POST", "/v1/completions", completion())
            self.assertEqual(status, 503, body)
            events = [l[6:] for l in r.read().decode().split("\n") if l.startswith("data: ")]
            conn.close()
            self.assertEqual(s.proc.wait(timeout=60), 0, s.log)
            return events
        finally:
            s.stop()

    def test_running_requests_finish_within_the_grace(self):
        events = self.run_stream_through_sigterm("30")
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(json.loads(events[-2])["choices"][0]["finish_reason"], "length")

    def test_requests_past_the_grace_end_with_a_503(self):
        events = self.run_stream_through_sigterm("0.05")
        self.assertNotIn("[DONE]", events)
        self.assertEqual(json.loads(events[-1])["error"]["status"], 503)


class KeyRevokedMidRequest(unittest.TestCase):
    def test_a_running_request_keeps_its_owner_and_owners_survive_a_reload(self):
        d = tempfile.mkdtemp(prefix="kvsieve_revoke_")
        path = os.path.join(d, "keys")
        with open(path, "w") as f:
            f.write("key-one\n")
        s = Server("--api-key-file", path, ctx=2048)
        try:
            def call(key, method, p, body=None):
                return s.json(method, p, body, headers={"Authorization": "Bearer " + key})

            def reload(text, key, want):
                with open(path, "w") as f:
                    f.write(text)
                s.proc.send_signal(1)  # SIGHUP
                for _ in range(100):
                    if call(key, "GET", "/v1/models")[0] == want:
                        return
                    time.sleep(0.05)
                self.fail("the key file was not re-read")

            self.assertEqual(call("key-one", "POST", "/v1/completions", completion(conversation="c"))[0], 200)
            conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=TIMEOUT)
            conn.request("POST", "/v1/completions",
                         json.dumps({"prompt": "Hello there", "max_tokens": 1500, "temperature": 0, "stream": True,
                                     "conversation": "long"}),
                         {"Content-Type": "application/json", "Authorization": "Bearer key-one"})
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            reload("key-two\n", "key-one", 401)  # revoked while its request runs
            events = [l[6:] for l in r.read().decode().split("\n") if l.startswith("data: ")]
            conn.close()
            self.assertEqual(events[-1], "[DONE]")  # it ran to its end as key-one's request
            self.assertEqual(call("key-two", "GET", "/v1/cache/conversations")[1]["data"], [])
            reload("key-two\nkey-one\n", "key-one", 200)  # back, in another place in the file
            ids = sorted(c["id"] for c in call("key-one", "GET", "/v1/cache/conversations")[1]["data"])
            self.assertEqual(ids, ["c", "long"])
            self.assertTrue(s.alive())
        finally:
            self.assertEqual(s.stop(), 0, s.log)
            shutil.rmtree(d, ignore_errors=True)


class NonLoopbackWithoutKeys(unittest.TestCase):
    """A server reachable beyond this machine (bound to 0.0.0.0 on a free port) without API keys says so on stderr."""

    def wait_for(self, s, text):
        for _ in range(100):
            if text in s.log:
                return True
            time.sleep(0.05)
        return False

    def test_binding_every_address_without_keys_warns(self):
        s = Server(host="0.0.0.0")
        try:
            self.assertTrue(self.wait_for(s, "warning:"), s.log)
            line = next(l for l in s.log.splitlines() if l.startswith("warning:"))
            self.assertIn("0.0.0.0", line)
            self.assertIn("without API keys", line)
            self.assertIn("--api-key", line)
            self.assertTrue(s.alive())
        finally:
            self.assertEqual(s.stop(), 0, s.log)

    def test_no_warning_with_keys(self):
        s = Server("--api-key", "nonloopback-key-0123", host="0.0.0.0")
        try:
            self.assertTrue(self.wait_for(s, "1 API key(s)"), s.log)  # printed where the warning would be
            self.assertNotIn("warning:", s.log)
        finally:
            self.assertEqual(s.stop(), 0, s.log)


class MetricsOffByDefault(unittest.TestCase):
    def test_metrics_is_a_404_without_the_flag(self):
        s = Server()
        try:
            status, body = s.json("GET", "/metrics")
            self.assertEqual(status, 404)
            self.assertIn("error", body)
            self.assertTrue(s.alive())
        finally:
            self.assertEqual(s.stop(), 0, s.log)


class CacheDirQuota(SharedServerCase):
    """--cache-dir-quota-mb: each key's folder holds at most that many bytes of saved sequences."""
    A, B = "quota-key-alpha-0123", "quota-key-beta-45678"
    QUOTA_MB = 0.05

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvsieve_quota_")
        cls.s = Server("--api-key", cls.A, "--api-key", cls.B, "--cache-dir", cls.dir,
                       "--cache-dir-quota-mb", str(cls.QUOTA_MB))

    def as_(self, key, method, path, body=None):
        return self.s.json(method, path, body, headers={"Authorization": "Bearer " + key})

    def saved_bytes(self):
        """Bytes of .kvseq files in each owner folder."""
        out = {}
        for d in os.listdir(self.dir):
            folder = os.path.join(self.dir, d)
            if os.path.isdir(folder):
                out[d] = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".kvseq"))
        return out

    def test_saves_past_the_quota_are_refused_and_deleting_frees_space(self):
        quota = int(self.QUOTA_MB * 1048576)
        prompt = "Once upon a time there was a cat"
        status, body = self.as_(self.A, "POST", "/v1/completions", completion(prompt, conversation="c", seed=1))
        self.assertEqual(status, 200, body)
        # Explicit saves of the same conversation: each the same size, until the next one would pass the quota.
        sizes, refused = [], None
        for i in range(50):
            status, body = self.as_(self.A, "POST", "/v1/cache/save", {"name": "conv-%d" % i, "conversation": "c"})
            if status != 200:
                refused = (status, body)
                break
            sizes.append(body["file_bytes"])
        self.assertIsNotNone(refused, "no save was refused")
        self.assertEqual(refused[0], 403, refused)
        self.assertIn("--cache-dir-quota-mb", refused[1]["error"]["message"])
        self.assertNotIn(self.dir, refused[1]["error"]["message"])
        self.assertEqual(len(set(sizes)), 1, sizes)
        self.assertEqual(len(sizes), quota // sizes[0])
        self.assertLessEqual(max(self.saved_bytes().values()), quota)
        # A request's cache_save past the quota: the answer comes, the save is refused in usage.
        status, body = self.as_(self.A, "POST", "/v1/completions",
                                completion(prompt + " that liked to sleep in the sun", cache_save="big"))
        self.assertEqual(status, 200, body)
        self.assertIn(body["choices"][0]["finish_reason"], ("stop", "length"))
        self.assertIn("--cache-dir-quota-mb", body["usage"]["cache_save_error"])
        self.assertEqual(body["usage"]["cache_saved_bytes"], 0)
        # Saving over a name replaces its file: it needs no more room.
        status, body = self.as_(self.A, "POST", "/v1/cache/save", {"name": "conv-0", "conversation": "c"})
        self.assertEqual(status, 200, body)
        # Deleting frees space; a missing or bad name is a 404 / 400.
        status, body = self.as_(self.A, "DELETE", "/v1/cache/saved/conv-1")
        self.assertEqual((status, body), (200, {"name": "conv-1", "object": "kv_cache.saved", "deleted": True}))
        self.assertEqual(self.as_(self.A, "DELETE", "/v1/cache/saved/conv-1")[0], 404)
        self.assertEqual(self.as_(self.A, "DELETE", "/v1/cache/saved/.hidden")[0], 400)
        status, body = self.as_(self.A, "POST", "/v1/cache/save", {"name": "conv-new", "conversation": "c"})
        self.assertEqual(status, 200, body)
        # The other key's folder has its own quota, and it cannot delete the first key's files.
        self.assertEqual(self.as_(self.B, "DELETE", "/v1/cache/saved/conv-0")[0], 404)
        self.assertEqual(self.as_(self.B, "POST", "/v1/completions", completion(prompt, conversation="c"))[0], 200)
        status, body = self.as_(self.B, "POST", "/v1/cache/save", {"name": "conv-0", "conversation": "c"})
        self.assertEqual(status, 200, body)


    def test_a_bad_quota_option_stops_the_start_with_one_error(self):
        for opts, needle in ((["--cache-dir-quota-mb", "5"], "needs --cache-dir"),
                             (["--cache-dir", self.dir, "--cache-dir-quota-mb", "-1"], "must be ≥ 0")):
            p = subprocess.run([BIN, "serve", "-m", MODEL, "--port", "0", *opts], capture_output=True, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            err = p.stderr.decode("utf-8", "replace").strip()
            self.assertIn(needle, err)
            self.assertEqual(len(err.splitlines()), 1, err)


class CacheDirProbes(SharedServerCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvsieve_hostile_")
        # A temporary left by a crash: removed at start.
        with open(os.path.join(cls.dir, ".old.kvseq.Zz09aB.tmp"), "w") as f:
            f.write("half")
        cls.s = Server("--cache-dir", cls.dir)

    def test_stale_temporary_removed_at_start(self):
        self.assertFalse(os.path.exists(os.path.join(self.dir, ".old.kvseq.Zz09aB.tmp")))

    def test_failed_save_keeps_the_answer(self):
        os.mkdir(os.path.join(self.dir, "blocked.kvseq"))  # a folder where the file should go: the rename fails
        status, body = self.s.json("POST", "/v1/completions", completion(cache_save="blocked"))
        self.assertEqual(status, 200, body)
        self.assertEqual(body["choices"][0]["finish_reason"] in ("stop", "length"), True)
        err = body["usage"]["cache_save_error"]
        self.assertIn("could not be saved", err)
        self.assertNotIn(self.dir, err)
        self.assertEqual(body["usage"]["cache_saved_bytes"], 0)

    def test_symlink_at_a_temporary_name_is_not_followed(self):
        victim = os.path.join(self.dir, "victim.txt")
        with open(victim, "w") as f:
            f.write("precious")
        os.symlink(victim, os.path.join(self.dir, "s1.kvseq.tmp"))
        status, body = self.s.json("POST", "/v1/completions", completion(cache_save="s1"))
        self.assertEqual(status, 200, body)
        self.assertNotIn("cache_save_error", body["usage"])
        self.assertGreater(body["usage"]["cache_saved_bytes"], 0)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")
        saved = os.path.join(self.dir, "s1.kvseq")
        self.assertFalse(os.path.islink(saved))
        self.assertEqual(os.stat(saved).st_mode & 0o777, 0o600)


def rss_bytes(pid):
    """The resident memory of process `pid` in bytes (VmRSS of /proc/PID/status)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for process %d" % pid)


def read_answer(sock, seconds=10):
    """The bytes of one answer on `sock`: its head and Content-Length body (or up to the close), within `seconds`."""
    out = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        out += chunk
        head, sep, rest = out.partition(b"\r\n\r\n")
        if sep:
            m = re.search(rb"Content-Length: (\d+)", head, re.I)
            if m and len(rest) >= int(m.group(1)):
                break
    return out


def answers(data):
    """The status codes of the answers in `data`, in order (Content-Length framed)."""
    codes = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        codes.append(int(head.split(b" ", 2)[1]))
        m = re.search(rb"Content-Length: (\d+)", head, re.I)
        n = int(m.group(1)) if m else 0
        data = rest[n:]
    return codes


def send_until_refused(sock, total, piece=1 << 20):
    """Sends up to `total` bytes of filler on `sock` in pieces; the bytes sent before the server stopped taking
    them (an error, or 5 s without progress)."""
    sock.settimeout(5)
    sent = 0
    buf = b"a" * piece
    try:
        while sent < total:
            sent += sock.send(buf[:min(piece, total - sent)])
    except OSError:
        pass
    return sent


class FrontLimits(SharedServerCase):
    """Limits that hold before the server trusts a byte of a request: with two keys and the default limits (but a
    3 s --read-timeout to keep the test short), no client without a key can make the server read or hold more than
    the body cap, hold its threads, or stall other clients."""
    A, B = "key-alpha-0123456789", "key-beta-9876543210"
    BODY_CAP = 8 << 20  # the default --max-body-mb
    MARGIN = 24 << 20   # resident growth allowed beyond it (allocator slack, threads)

    @classmethod
    def setUpClass(cls):
        cls.s = Server("--api-key", cls.A, "--api-key", cls.B, "--read-timeout", "3", "--metrics")

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.s.port), timeout=TIMEOUT)

    def head(self, path="/v1/completions", method="POST", extra=b"", key=None):
        h = b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" % (method.encode(), path.encode())
        if key:
            h += b"Authorization: Bearer " + key.encode() + b"\r\n"
        return h + extra

    def assertBoundedGrowth(self, before, what):
        grown = rss_bytes(self.s.proc.pid) - before
        self.assertLess(grown, self.BODY_CAP + self.MARGIN, "%s: the server grew by %d bytes" % (what, grown))

    def test_compressed_bodies_are_a_415_before_any_byte_is_inflated(self):
        # 300 MB of zeros, gzip'ed to about 300 KB.
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        bomb = b"".join(z.compress(bytes(1 << 20)) for _ in range(300)) + z.flush()
        self.assertLess(len(bomb), 400 << 10)
        before = rss_bytes(self.s.proc.pid)
        for key in (None, self.A):
            for encoding in (b"gzip", b"br", b"deflate"):
                with self.connect() as c:
                    c.sendall(self.head(key=key, extra=b"Content-Encoding: %s\r\nContent-Length: %d\r\n\r\n" %
                                        (encoding, len(bomb))))
                    send_until_refused(c, len(bomb))
                    out = read_answer(c)
                self.assertTrue(out.startswith(b"HTTP/1.1 415"), (key, encoding, out[:200]))
                self.assertIn(b"Content-Encoding", out)
        self.assertBoundedGrowth(before, "gzip and brotli bombs")

    def test_chunked_bodies_are_read_under_the_body_limit(self):
        before = rss_bytes(self.s.proc.pid)
        with self.connect() as c:  # without a key: 401 on the head, before any chunk
            c.sendall(self.head(extra=b"Transfer-Encoding: chunked\r\n\r\n"))
            out = read_answer(c)
            self.assertTrue(out.startswith(b"HTTP/1.1 401"), out[:200])
            sent = send_until_refused(c, 100 << 20)
        self.assertLess(sent, 60 << 20, "the server kept reading a refused chunked body")
        with self.connect() as c:  # with a key: 100 MB in 1 MB chunks, refused once past the 8 MB limit
            c.sendall(self.head(key=self.A, extra=b"Transfer-Encoding: chunked\r\n\r\n"))
            chunk = b"100000\r\n" + bytes(1 << 20) + b"\r\n"
            sent = 0
            try:
                while sent < 100 << 20:
                    c.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass
            out = read_answer(c)
            self.assertTrue(out.startswith(b"HTTP/1.1 413"), out[:200])
        self.assertLess(sent, 60 << 20, "the server kept reading a chunked body past its limit")
        self.assertBoundedGrowth(before, "a 100 MB chunked body")
        # A chunked completion under the limit is answered as with a Content-Length.
        body = json.dumps(completion()).encode()
        out = self.s.raw(self.head(key=self.A, extra=b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n") +
                         b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        self.assertTrue(out.startswith(b"HTTP/1.1 200"), out[:300])
        self.assertIn(b'"text_completion"', out)
        # Both framings at once are refused as well.
        out = self.s.raw(self.head(key=self.A, extra=b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello"))
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out[:200])

    def test_no_key_is_a_401_before_the_body(self):
        before = rss_bytes(self.s.proc.pid)
        with self.connect() as c:
            c.sendall(self.head(extra=b"Content-Length: %d\r\n\r\n" % (100 << 20)))
            out = read_answer(c)  # no body byte sent: the answer comes on the head alone
        self.assertTrue(out.startswith(b"HTTP/1.1 401"), out[:200])
        with self.connect() as c:  # the same with a key but over the cap: 413 on the head alone
            c.sendall(self.head(key=self.B, extra=b"Content-Length: %d\r\n\r\n" % (100 << 20)))
            out = read_answer(c)
        self.assertTrue(out.startswith(b"HTTP/1.1 413"), out[:200])
        self.assertBoundedGrowth(before, "announced bodies")

    def test_conflicting_or_malformed_content_length_is_a_400(self):
        for extra in (b"Content-Length: 2\r\nContent-Length: 40\r\n", b"Content-Length: -1\r\n",
                      b"Content-Length: 1e3\r\n", b"Content-Length: 2, 2\r\n", b"Content-Length: \r\n"):
            out = self.s.raw(self.head(key=self.A, extra=extra + b"\r\n{}"))
            self.assertTrue(out.startswith(b"HTTP/1.1 400"), (extra, out[:200]))
            self.assertIn(b"Content-Length", out)

    def test_header_floods_are_a_431(self):
        before = rss_bytes(self.s.proc.pid)
        # 6,000 headers of 8 KB (48 MB): refused once the first 64 KB are in, and not read further.
        line = b"X-Filler-%05d: " + b"v" * 8180 + b"\r\n"
        with self.connect() as c:
            c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(line % i for i in range(10)))
            out = read_answer(c)
            self.assertTrue(out.startswith(b"HTTP/1.1 431"), out[:200])
            sent = 0
            c.settimeout(5)
            try:
                for i in range(10, 6000):
                    sent += c.send(line % i)
            except OSError:
                pass
            self.assertLess(sent, 40 << 20, "the server kept reading a refused header block")
        # 101 short headers: over the count.
        out = self.s.raw(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                         b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 431"), out[:200])
        self.assertBoundedGrowth(before, "a header flood")

    def test_slow_clients_do_not_stall_others_and_a_request_has_one_deadline(self):
        socks = []
        try:
            for _ in range(300):
                c = self.connect()
                c.sendall(b"G")
                socks.append(c)
            # While they dribble a byte each (well within the 3 s deadline), /health answers at once.
            for _ in range(3):
                for c in socks:
                    c.sendall(b"E")
                t = time.monotonic()
                self.assertEqual(self.s.request("GET", "/health")[0], 200)
                self.assertLess(time.monotonic() - t, 1.0)
            # A client sending one byte a second is cut off by the request's deadline (3 s), not kept per byte.
            start = time.monotonic()
            with self.connect() as c:
                closed = None
                for b in b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" * 10:
                    try:
                        c.sendall(bytes([b]))
                        c.settimeout(1)
                        data = c.recv(4096)
                    except socket.timeout:
                        continue
                    except OSError:
                        data = b""
                    closed = time.monotonic() - start
                    self.assertTrue(data == b"" or data.startswith(b"HTTP/1.1 408"), data[:100])
                    break
            self.assertIsNotNone(closed, "a request dribbled at 1 byte/s was never cut off")
            self.assertLess(closed, 3 + 2)
        finally:
            for c in socks:
                c.close()

    def test_pipelined_requests_are_answered_in_order(self):
        with self.connect() as c:
            body = json.dumps(completion()).encode()
            post = self.head(key=self.A, extra=b"Content-Length: %d\r\n\r\n" % len(body)) + body
            health = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            missing = b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            c.sendall(health + post + health + missing)  # one write
            out = b""
            start = time.monotonic()
            while time.monotonic() - start < TIMEOUT:
                chunk = c.recv(65536)
                if not chunk:
                    break
                out += chunk
            self.assertEqual(answers(out), [200, 200, 200, 404], out[:400])
            self.assertIn(b'"text_completion"', out)
            self.assertLess(time.monotonic() - start, TIMEOUT / 2)  # closed after the last, not after a timeout

    def test_health_is_liveness_only_and_streams_name_the_servers_model(self):
        status, body = self.s.json("GET", "/health")
        self.assertEqual((status, body), (200, {"status": "ok"}))
        # A model name that is not the server's is a 404 quoting a bounded part of it; a stream names the server's model.
        big = "m" * (1 << 20)
        status, hdrs, data = self.s.request("POST", "/v1/completions", completion(model=big, stream=True, max_tokens=4),
                                            headers={"Authorization": "Bearer " + self.A})
        self.assertEqual(status, 404, data[:200])
        self.assertLess(len(data), 4 << 10)
        self.assertEqual(json.loads(data)["error"]["code"], "model_not_found")
        status, hdrs, data = self.s.request("POST", "/v1/completions",
                                            completion(model="tiny-llama-f32", stream=True, max_tokens=4),
                                            headers={"Authorization": "Bearer " + self.A})
        self.assertEqual(status, 200, data[:200])
        self.assertIn(b'"model":"tiny-llama-f32"', data)

    def test_connections_over_the_limit_are_refused_at_once(self):
        s = Server("--max-connections", "4")
        socks = []
        try:
            for _ in range(4):
                socks.append(socket.create_connection(("127.0.0.1", s.port), timeout=TIMEOUT))
            with socket.create_connection(("127.0.0.1", s.port), timeout=TIMEOUT) as c:
                start = time.monotonic()
                out = read_answer(c, 5)
                self.assertTrue(out.startswith(b"HTTP/1.1 503"), out[:200])
                self.assertLess(time.monotonic() - start, 2)
            for c in socks:
                c.close()
            socks = []
            harness.wait_for(lambda: s.request("GET", "/health")[0] == 200, "the server did not free its connections", 10)
        finally:
            for c in socks:
                c.close()
            self.assertEqual(s.stop(), 0, s.log)

    def test_shutdown_does_not_wait_for_idle_keep_alive_connections(self):
        s = Server()
        try:
            conns = []
            for _ in range(3):
                c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=TIMEOUT)
                c.request("GET", "/health")
                self.assertEqual(c.getresponse().read(), b'{"status":"ok"}')
                conns.append(c)  # left open, idle
            start = time.monotonic()
        finally:
            rc = s.stop()
        self.assertEqual(rc, 0, s.log)
        self.assertLess(time.monotonic() - start, 3)
        for c in conns:
            c.close()

    def test_bad_limits_are_refused_by_name(self):
        for opt, value in (("--max-headers", "0"), ("--max-header-kb", "0"), ("--keep-alive", "0"),
                           ("--max-connections", "100000"), ("--max-body-mb", "-1"), ("--read-timeout", "nan")):
            p = subprocess.run([BIN, "serve", "-m", MODEL, "--port", "0", opt, value], capture_output=True, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(opt.encode(), p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
