"""Integration-test harness: starts the real binaries on 127.0.0.1 (port 0) in
temp dirs and talks to them over HTTP. Every wait is bounded in time and ends
on an observed condition (a file written, a state reached), never on a sleep.

The binaries come from $GPUQ_BUILD (default: ./build)."""

import http.client
import json
import os
import signal
import subprocess
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("GPUQ_BUILD", os.path.join(ROOT, "build"))
SANITIZED = os.environ.get("GPUQ_SANITIZED") == "1"
# Sanitized binaries run several times slower; bounds scale with them.
SLOW = 3.0 if SANITIZED else 1.0


def binary(name):
    return os.path.join(BUILD, name)


def wait_until(cond, timeout_s, what, interval_s=0.01):
    """Polls cond() until it returns a truthy value or timeout_s passes."""
    deadline = time.monotonic() + timeout_s * SLOW
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s * SLOW:.1f}s waiting for {what}")
        time.sleep(interval_s)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def __repr__(self):
        return f"<Response {self.status} {self.body[:300]!r}>"


class Client:
    """A keep-alive HTTP client bound to one base URL and one key."""

    def __init__(self, url, key=None, timeout=30):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.key = key
        self.timeout = timeout
        self.conn = None

    def _connect(self):
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout * SLOW)

    def request(self, method, path, body=None, key=..., headers=None, raw=False):
        hdrs = dict(headers or {})
        k = self.key if key is ... else key
        if k:
            hdrs["Authorization"] = f"Bearer {k}"
        data = None
        if body is not None:
            if raw:
                data = body
            else:
                data = json.dumps(body).encode()
                hdrs.setdefault("Content-Type", "application/json")
        for attempt in range(2):
            if self.conn is None:
                self._connect()
            try:
                self.conn.request(method, path, body=data, headers=hdrs)
                r = self.conn.getresponse()
                payload = r.read()
                resp = Response(r.status, r.getheaders(), payload)
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                return resp
            except (ConnectionError, http.client.RemoteDisconnected, BrokenPipeError):
                self.close()
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Head:
    """A real gpuqd on 127.0.0.1:0 with its data in data_dir."""

    def __init__(self, data_dir, config_text=None, env=None):
        self.data_dir = str(data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        self.config_path = None
        if config_text is not None:
            self.config_path = os.path.join(self.data_dir, "gpuqd.conf")
            with open(self.config_path, "w") as f:
                f.write(config_text)
        self.env = dict(os.environ)
        self.env.pop("GPUQ_ADMIN_KEY", None)
        self.env.update(env or {})
        self.proc = None
        self.url = None
        self.admin_key = None
        self.log_path = os.path.join(self.data_dir, "gpuqd.log")

    def start(self, listen="127.0.0.1:0"):
        url_file = os.path.join(self.data_dir, "head.url")
        if os.path.exists(url_file):
            os.unlink(url_file)
        args = [binary("gpuqd"), "--listen", listen, "--data", self.data_dir]
        if self.config_path:
            args += ["--config", self.config_path]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, env=self.env, stdout=self.log, stderr=self.log,
                                     start_new_session=True)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"gpuqd exited with {self.proc.returncode}: {self.tail()}")
            return os.path.exists(url_file)

        wait_until(ready, 20, "gpuqd to write head.url")
        with open(url_file) as f:
            self.url = f.read().strip()
        with open(os.path.join(self.data_dir, "admin.key")) as f:
            self.admin_key = f.read().strip()
        return self

    def tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def client(self, key=...):
        return Client(self.url, self.admin_key if key is ... else key)

    def admin(self):
        return self.client(self.admin_key)

    def add_tenant(self, name, tier="paid"):
        r = self.admin().post("/v1/tenants", {"name": name, "tier": tier})
        assert r.status == 201, r
        return r.json()["key"]

    def add_worker_token(self, name="agents"):
        r = self.admin().post("/v1/worker-tokens", {"name": name})
        assert r.status == 201, r
        return r.json()["token"]

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self):
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20 * SLOW)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()
        return self.proc.returncode


# Every process this test run starts, and every runtime its agents start
# (they inherit the environment), carries this entry: pids_with_env finds
# only this run's processes, not those of another run on the same machine
# that uses the same worker ids.
TEST_RUN_ENV = f"GPUQ_TEST_RUN={os.getpid()}".encode()


def spawn(args, log_path, env=None):
    """Starts a helper process (agent, runtime) logging to log_path."""
    e = dict(os.environ)
    e.update(env or {})
    e["GPUQ_TEST_RUN"] = str(os.getpid())
    log = open(log_path, "ab")
    return subprocess.Popen(args, env=e, stdout=log, stderr=log, start_new_session=True)


def pids_with_env(needle, exact=False):
    """PIDs of live processes of this test run (TEST_RUN_ENV) with an
    environment entry starting with needle (bytes; exact: equal to it), e.g.
    b"GPUQ_WORKER_ID=h-gpu0" for the runtimes of one worker."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if (state != "Z" and TEST_RUN_ENV in env and
                any(e == needle if exact else e.startswith(needle) for e in env)):
            pids.append(int(d))
    return pids


def stop_proc(proc, timeout=20):
    if proc is None or proc.poll() is not None:
        return proc.returncode if proc else None
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout * SLOW)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    return proc.returncode


def tiny_png(width=8, height=8, seed=1):
    """A small valid PNG with varied pixels (zlib + CRC from the standard library)."""
    import struct
    import zlib
    rows = b""
    for y in range(height):
        rows += b"\x00" + bytes(((x * 31 + y * 17 + seed * 7) % 256) for x in range(width * 3))

    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


class FakeWorker:
    """Speaks the worker protocol (docs/protocol-worker.md) from Python, so head
    tests can drive assignments without the agent."""

    def __init__(self, head, token, worker_id="fake-gpu0", capabilities=("image.fast",),
                 models=None, vram_mb=32000, concurrency=1, ahead=0):
        self.c = Client(head.url, token)
        self.id = worker_id
        self.caps = list(capabilities)
        self.models = models if models is not None else [
            {"name": "image-v2", "vram_mb": 22000, "load_ms": 4800, "class": "generation",
             "pinned": True, "loaded": True}]
        self.vram_mb = vram_mb
        self.concurrency = concurrency
        self.ahead = ahead

    def register(self):
        body = {
            "protocol": 1, "worker_id": self.id, "host": "testhost",
            "gpu": {"index": 0, "name": "Fake GPU", "uuid": "GPU-" + self.id,
                    "vram_total_mb": self.vram_mb},
            "capabilities": self.caps, "concurrency": self.concurrency,
            "models": self.models}
        if self.ahead:
            body["ahead"] = self.ahead
        r = self.c.post("/v1/agent/register", body)
        assert r.status == 200, r
        return r.json()

    def heartbeat(self, state="ready", running=(), temp_c=50.0, health="ok"):
        loaded = [{"name": m["name"], "vram_mb": m["vram_mb"], "pinned": m.get("pinned", False),
                   "last_used_ms_ago": 0} for m in self.models if m.get("loaded")]
        used = sum(m["vram_mb"] for m in loaded)
        r = self.c.post("/v1/agent/heartbeat", {
            "protocol": 1, "worker_id": self.id, "state": state,
            "telemetry": {"temp_c": temp_c, "vram_total_mb": self.vram_mb, "vram_used_mb": used,
                          "vram_free_mb": self.vram_mb - used, "util_pct": 10, "power_w": 100,
                          "throttle_reasons": [], "health": health},
            "loaded_models": loaded,
            "running": [{"job_id": str(j), "attempt": a} for j, a in running]})
        return r

    def start(self):
        self.register()
        r = self.heartbeat()
        assert r.status == 200, r
        return self

    def poll(self, wait=5):
        r = self.c.get(f"/v1/agent/assignments?worker_id={self.id}&wait={wait}")
        if r.status == 204:
            return None
        assert r.status == 200, r
        return r.json()["assignments"][0]

    def complete(self, a, data=None, content_type="image/png", attempt=None):
        att = a["attempt"] if attempt is None else attempt
        return self.c.request(
            "POST",
            f"/v1/agent/jobs/{a['job_id']}/complete?worker_id={self.id}&attempt={att}"
            f"&load_ms=0&run_ms=10",
            body=tiny_png() if data is None else data, raw=True,
            headers={"Content-Type": content_type})

    def fail(self, a, cls="oom", message="out of memory"):
        return self.c.post(f"/v1/agent/jobs/{a['job_id']}/fail", {
            "protocol": 1, "worker_id": self.id, "attempt": a["attempt"], "class": cls,
            "message": message})

    def progress(self, a, phase="generating", progress=0.5):
        return self.c.post(f"/v1/agent/jobs/{a['job_id']}/progress", {
            "protocol": 1, "worker_id": self.id, "attempt": a["attempt"], "phase": phase,
            "progress": progress})
