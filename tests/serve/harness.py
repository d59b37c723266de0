"""What the server tests that start their own processes share (test_hostile_clients.py, test_replicas_nginx.py):
their two arguments, a child process whose log is read on a thread, `kvsieve serve` started on a free loopback port,
one HTTP request on a new connection, and polling with a deadline. Python standard library only.

The tests import it as a sibling module: Python puts the folder of the script it runs first on sys.path, so CTest's
`python3 .../tests/serve/test_*.py` finds it from any working directory, the build folder included."""
import http.client
import json
import re
import socket
import subprocess
import sys
import threading
import time


def binary_and_model():
    """(KVSIEVE_BINARY, MODEL.gguf), the script's first two arguments, taken out of sys.argv so that unittest.main()
    sees only its own options. Exits with status 2 and a usage line when they are missing."""
    if len(sys.argv) < 3:
        sys.exit("usage: %s KVSIEVE_BINARY MODEL.gguf [unittest options]" % sys.argv[0])
    binary, model = sys.argv[1], sys.argv[2]
    del sys.argv[1:3]
    return binary, model


def free_port():
    """A TCP port of 127.0.0.1 that was free a moment ago (bound by the system, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, what, seconds=60):
    """Polls pred() every 50 ms until it is true; AssertionError(what) after `seconds`."""
    deadline = time.monotonic() + seconds
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.05)


def request(port, method, path, body=None, headers=None, raw_body=None, timeout=30):
    """(status, headers as a dict, body bytes) of one request to 127.0.0.1:port on a new connection. `body` is sent as
    JSON (Content-Type application/json unless `headers` names one), `raw_body` as the bytes given; `timeout` in
    seconds for the connection and each read. Socket errors (OSError) propagate."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = dict(headers or {})
        data = raw_body
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


class Process:
    """A child process (stdout discarded) whose stderr is collected line by line on a thread, so that it never blocks
    on a full pipe; `log` is what it wrote so far. stop() ends it with SIGTERM (SIGKILL after 30 s) and returns its
    exit status."""

    def __init__(self, args):
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(
            l.decode("utf-8", "replace") for l in iter(self.proc.stderr.readline, b"")), daemon=True)
        self.reader.start()

    @property
    def log(self):
        return "".join(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.reader.join(timeout=10)
        self.proc.stderr.close()
        return self.proc.returncode


class Server(Process):
    """`kvsieve serve -m MODEL` on a port the system picks (`--port 0`), one thread, 2 slots of `ctx` tokens, with the
    extra options `opts`; `port` is the one it logged ("listening on http://HOST:PORT"). AssertionError with its log
    when it exits before listening or does not listen within 60 s. `timeout`: seconds for each request()."""

    def __init__(self, binary, model, *opts, host="127.0.0.1", ctx=256, timeout=30):
        super().__init__([binary, "serve", "-m", model, "--host", host, "--port", "0", "-t", "1", "--slots", "2",
                          "-c", str(ctx), *opts])
        self.host = host
        self.timeout = timeout
        self.port = None
        deadline = time.monotonic() + 60
        while self.port is None:
            m = re.search(r"listening on http://[^ ]*:(\d+)", self.log)
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise AssertionError("the server exited before listening:\n" + self.log)
            elif time.monotonic() > deadline:
                self.stop()
                raise AssertionError("the server did not start listening:\n" + self.log)
            else:
                time.sleep(0.05)

    def request(self, method, path, body=None, headers=None, raw_body=None):
        """(status, headers, body bytes) of one request on a new connection (see the module's request())."""
        return request(self.port, method, path, body, headers, raw_body, self.timeout)

    def json(self, method, path, body=None, headers=None, raw_body=None):
        """(status, parsed JSON body); ValueError when the body is not JSON."""
        status, _, data = self.request(method, path, body, headers, raw_body)
        return status, json.loads(data.decode("utf-8"))

    def raw(self, data):
        """Sends raw bytes on a new connection; the answer's bytes, read until the server closes, the answer's
        Content-Length is complete, or `timeout` seconds passed."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout) as s:
            s.sendall(data)
            out = b""
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
                if b"\r\n\r\n" in out:
                    head, _, rest = out.partition(b"\r\n\r\n")
                    m = re.search(rb"Content-Length: (\d+)", head, re.I)
                    if m and len(rest) >= int(m.group(1)):
                        break
            return out

    def alive(self):
        """The process runs and GET /health answers 200."""
        return self.proc.poll() is None and self.request("GET", "/health")[0] == 200
