"""Fault-injection kit for the fault suite (test_faults.py): a TCP proxy
between agents and the head that can cut and restore the link and that reads
the HTTP going through it (so a test counts the completions the head
accepted, per job and attempt), a small tmpfs that can be filled and freed,
an agent process wrapper, a submitter that survives a dying head, and the
ledger check every scenario ends with: no acknowledged job lost, each in
exactly one terminal state, at most one accepted result per job.

Every wait is bounded and ends on an observed condition."""

import errno
import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.parse
import uuid

from gpuq_harness import SLOW, Client, binary, pids_with_env, spawn, wait_until

TERMINAL = ("succeeded", "failed", "cancelled", "dead", "expired")
FAKES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fakes")


# --- HTTP observation ----------------------------------------------------------

class HttpStream:
    """Incremental parser of one direction of an HTTP/1.1 connection. Calls
    on_message(start_line, headers, body) once per message; bodies up to
    keep_body bytes are kept (None when larger). Content-Length and chunked
    bodies; anything else marks the stream broken (it is still forwarded)."""

    def __init__(self, is_response, on_message, keep_body=65536, no_body=lambda: False):
        self.is_response = is_response
        self.on_message = on_message
        self.keep_body = keep_body
        self.no_body = no_body  # for responses: the request was one without a body answer
        self.buf = bytearray()
        self.state = "head"
        self.need = 0
        self.msg = None
        self.body = None
        self.broken = None

    def feed(self, data):
        if self.broken:
            return
        self.buf += data
        try:
            while self._step():
                pass
        except (ValueError, IndexError) as e:
            self.broken = f"unparsable HTTP: {e}"

    def _emit(self):
        start, headers = self.msg
        body = bytes(self.body) if self.body is not None else None
        self.msg, self.body, self.state = None, None, "head"
        self.on_message(start, headers, body)

    def _take_body(self):
        n = min(self.need, len(self.buf))
        if self.body is not None:
            if len(self.body) + n <= self.keep_body:
                self.body += self.buf[:n]
            else:
                self.body = None
        del self.buf[:n]
        self.need -= n
        return self.need == 0

    def _step(self):
        if self.state == "head":
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            del self.buf[:end + 4]
            headers = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                headers[k.strip().lower()] = v.strip()
            self.msg = (lines[0], headers)
            self.body = bytearray()
            status = int(lines[0].split()[1]) if self.is_response else 0
            if self.is_response and (100 <= status < 200 or status in (204, 304) or self.no_body()):
                self._emit()
                return True
            if headers.get("transfer-encoding", "").lower() == "chunked":
                self.state = "chunk-size"
                return True
            if "content-length" in headers:
                self.need = int(headers["content-length"])
                self.state = "body"
                if self.need == 0:
                    self._emit()
                return True
            if self.is_response:
                raise ValueError("response without a length: " + lines[0])
            self._emit()
            return True
        if self.state == "body":
            if self._take_body():
                self._emit()
                return True
            return False
        if self.state == "chunk-size":
            end = self.buf.find(b"\r\n")
            if end < 0:
                return False
            size = int(bytes(self.buf[:end]).split(b";")[0], 16)
            del self.buf[:end + 2]
            if size == 0:
                self.state = "trailer"
            else:
                self.need = size + 2
                self.state = "chunk"
            return True
        if self.state == "chunk":
            if self._take_body():
                if self.body is not None:
                    del self.body[-2:]
                self.state = "chunk-size"
                return True
            return False
        if self.state == "trailer":
            end = self.buf.find(b"\r\n")
            if end < 0:
                return False
            line = bytes(self.buf[:end])
            del self.buf[:end + 2]
            if not line:
                self._emit()
            return True
        raise ValueError("bad state " + self.state)


class Exchange:
    """One request seen by the proxy and the status the head answered
    (None: no answer came back, e.g. the link was cut)."""

    def __init__(self, method, target, worker_id, t):
        self.method, self.target, self.worker_id, self.t = method, target, worker_id, t
        u = urllib.parse.urlparse(target)
        self.path = u.path
        self.query = dict(urllib.parse.parse_qsl(u.query))
        self.status = None
        self.attempt = None
        self.job_id = None
        parts = self.path.strip("/").split("/")
        if len(parts) == 5 and parts[:3] == ["v1", "agent", "jobs"]:
            self.job_id, self.kind = parts[3], parts[4]
        else:
            self.kind = parts[-1] if parts else ""

    def __repr__(self):
        return (f"{self.method} {self.target} [{self.worker_id} att={self.attempt}] "
                f"-> {self.status}")


def _rst_close(sock):
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class LinkProxy:
    """127.0.0.1:0 → upstream TCP proxy. cut() resets every open connection and
    every new one until restore(); exchanges lists the HTTP requests that went
    through, each with the status the upstream answered."""

    def __init__(self, upstream_host, upstream_port):
        self.upstream = (upstream_host, upstream_port)
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(256)
        self.port = self.lsock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.is_cut = False
        self.conns = set()
        self.exchanges = []
        self.refused = 0  # connections reset because the link was cut
        self.upstream_down = 0  # connections the upstream refused (head down)
        self.parse_errors = []
        self.closed = False
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.thread.start()

    # -- control --
    def cut(self):
        with self.lock:
            self.is_cut = True
            conns = list(self.conns)
            self.conns.clear()
        for a, b in conns:
            _rst_close(a)
            _rst_close(b)

    def restore(self):
        with self.lock:
            self.is_cut = False

    def close(self):
        self.closed = True
        self.cut()
        try:
            self.lsock.close()
        except OSError:
            pass

    # -- observation --
    def snapshot(self):
        with self.lock:
            return list(self.exchanges)

    def calls(self, kind, job_id=None):
        return [e for e in self.snapshot() if e.kind == kind
                and (job_id is None or e.job_id == str(job_id))]

    def accepted_completions(self):
        """job id -> sorted distinct attempts whose completion the head answered 200."""
        out = {}
        for e in self.calls("complete"):
            if e.status == 200:
                out.setdefault(e.job_id, set()).add(e.attempt)
        return out

    # -- plumbing --
    def _accept_loop(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            with self.lock:
                cut = self.is_cut
                if cut:
                    self.refused += 1
            if cut:
                _rst_close(c)
                continue
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            u = socket.create_connection(self.upstream, timeout=5)
            u.settimeout(None)
        except OSError:
            with self.lock:
                self.upstream_down += 1
            _rst_close(c)
            return
        for s in (c, u):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = (c, u)
        with self.lock:
            if self.is_cut:
                _rst_close(c)
                _rst_close(u)
                return
            self.conns.add(pair)
        pending = []  # exchanges waiting for their answer, in order

        def on_batch(method, target, body):
            """POST /v1/agent/outcomes: one exchange per completion it carries
            (docs/protocol-worker.md), answered by its item of the results."""
            t = time.monotonic()
            group = []
            try:
                items = json.loads(body.split(b"\n", 1)[0])["outcomes"]
            except (ValueError, KeyError, TypeError, AttributeError):
                items = []
            for it in items if isinstance(items, list) else []:
                e = Exchange(method, f"/v1/agent/jobs/{it.get('job_id')}/complete", None, t)
                e.worker_id, e.attempt = it.get("worker_id"), it.get("attempt")
                group.append(e)
            with self.lock:
                self.exchanges.extend(group)
                pending.append(group)

        def on_request(start, headers, body):
            method, target = start.split(" ")[:2]
            if urllib.parse.urlparse(target).path == "/v1/agent/outcomes":
                on_batch(method, target, body or b"")
                return
            wid = None
            if body and headers.get("content-type", "").startswith("application/json"):
                try:
                    wid = json.loads(body).get("worker_id")
                except (ValueError, AttributeError):
                    wid = None
            e = Exchange(method, target, wid, time.monotonic())
            if e.worker_id is None:
                e.worker_id = e.query.get("worker_id")
            if "attempt" in e.query:
                e.attempt = int(e.query["attempt"])
            elif body:
                try:
                    a = json.loads(body).get("attempt")
                    e.attempt = int(a) if a is not None else None
                except (ValueError, AttributeError, TypeError):
                    pass
            with self.lock:
                self.exchanges.append(e)
                pending.append(e)

        def on_response(start, headers, body):
            status = int(start.split()[1])
            with self.lock:
                if not pending:
                    return
                e = pending.pop(0)
                if not isinstance(e, list):
                    e.status = status
                    return
                results = []
                if status == 200:
                    try:
                        results = json.loads(body)["results"]
                    except (ValueError, KeyError, TypeError):
                        results = []
                for i, item in enumerate(e):  # no verdict for it: not accepted
                    item.status = (results[i].get("status") if i < len(results) else None) \
                        if status == 200 else status

        def head_pending():
            with self.lock:
                return bool(pending) and not isinstance(pending[0], list) \
                    and pending[0].method == "HEAD"

        # Requests: a batch of results is read for its header line (the agent
        # sends at most 1 MiB of results a batch); answers: a batch's results.
        req = HttpStream(False, on_request, keep_body=4 << 20)
        resp = HttpStream(True, on_response, keep_body=65536, no_body=head_pending)
        t = threading.Thread(target=self._pump, args=(u, c, resp, pair), daemon=True)
        t.start()
        self._pump(c, u, req, pair)
        t.join(timeout=30)
        with self.lock:
            self.conns.discard(pair)
        _rst_close(c)
        _rst_close(u)
        for s in (req, resp):
            if s.broken:
                self.parse_errors.append(s.broken)

    def _pump(self, src, dst, parser, pair):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            parser.feed(data)
            try:
                dst.sendall(data)
            except OSError:
                return


# --- tmpfs -----------------------------------------------------------------------

class Tmpfs:
    """A small tmpfs mounted at path; fill() writes a filler file until the
    disk is full, free() removes it."""

    def __init__(self, path, size_mb):
        self.path = str(path)
        self.size_mb = size_mb
        self.mounted = False
        self.filler = os.path.join(self.path, "filler")

    def mount(self):
        """Returns None when mounted, else why not (the caller skips on it)."""
        os.makedirs(self.path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0755",
                            "tmpfs", self.path], capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
            return f"mount -t tmpfs failed (rc {r.returncode}): {r.stderr.strip()}"
        self.mounted = True
        return None

    def free_bytes(self):
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self):
        """Writes zeros until ENOSPC; returns the bytes written."""
        n = 0
        chunk = b"\0" * 65536
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for _ in range(self.size_mb * 32):  # bounded: 64 KiB chunks, twice the size
                try:
                    n += os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
            for size in (4096, 512, 1):  # the tail, so that not one byte is left
                while True:
                    try:
                        n += os.write(fd, b"\0" * size)
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        return n

    def free(self):
        if os.path.exists(self.filler):
            os.unlink(self.filler)

    def umount(self):
        if self.mounted:
            subprocess.run(["umount", "-l", self.path], capture_output=True, timeout=20)
            self.mounted = False


# --- processes -------------------------------------------------------------------

def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def alive(pid):
    s = proc_state(pid)
    return s is not None and s != "Z"


def cpu_seconds(pid):
    """User + system CPU time of pid so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_in_file(path, needle):
    try:
        with open(path, "rb") as f:
            return f.read().count(needle.encode())
    except OSError:
        return 0


def file_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def read_lines(path):
    try:
        with open(path) as f:
            return [ln.rstrip("\n") for ln in f]
    except OSError:
        return []


class AgentProc:
    """A gpuq-agent with simulated GPUs, its config, token and log in its own
    folder; restartable with the same config (same worker ids)."""

    def __init__(self, head, tmp, host, url=None, gpus=2, runtime=None, extra=""):
        self.head, self.host, self.gpus = head, host, gpus
        self.url = url or head.url
        self.dir = os.path.join(str(tmp), "agent-" + host)
        os.makedirs(self.dir, exist_ok=True)
        self.log_path = os.path.join(self.dir, "agent.log")
        self.config = os.path.join(self.dir, "agent.conf")
        rt = runtime or binary("gpuq-sim-runtime") + " --scale 0.001"
        with open(self.config, "w") as f:
            f.write(f"""[agent]
runtime = {rt}
host = {host}
nvml = false
work_dir = {self.dir}/work
ping_interval_ms = 200
ping_timeout_ms = {int(2000 * SLOW)}
poll_wait_s = 2
telemetry_ms = 100
restart_min_ms = 50
restart_max_ms = 1000
{extra}
""")
        self.token = head.add_worker_token(host)
        self.proc = None
        self.starts = 0

    def start(self):
        args = [binary("gpuq-agent"), "--head", self.url, "--worker-token", self.token,
                "--config", self.config, "--sim-gpus", str(self.gpus)]
        with open(self.log_path, "ab") as f:
            f.write(f"---- test: agent start #{self.starts + 1} ----\n".encode())
        self.proc = spawn(args, self.log_path)
        self.starts += 1
        return self

    def worker_ids(self):
        return [f"{self.host}-gpu{i}" for i in range(self.gpus)]

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def check_alive(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"agent {self.host} exited {self.proc.returncode}: "
                                 f"{self.log()[-3000:]}")

    def ready_workers(self):
        self.check_alive()
        return [w for w in workers(self.head) if w["id"].startswith(self.host + "-")
                and w["state"] == "ready"]

    def wait_ready(self, n=None, timeout_s=20):
        n = self.gpus if n is None else n
        return wait_until(lambda: len(self.ready_workers()) >= n, timeout_s,
                          f"{n} workers of agent {self.host} ready")

    def runtime_pids(self):
        return pids_with_env(f"GPUQ_WORKER_ID={self.host}-gpu".encode())

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def teardown(self):
        """Ends the agent (SIGCONT first, in case a test stopped it) and the
        runtimes it started."""
        if self.proc and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except OSError:
                pass
        self.kill9()
        for pid in self.runtime_pids():
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


def workers(head):
    r = head.admin().get("/v1/workers")
    assert r.status == 200, r
    return r.json()["workers"]


# --- submitting and counting ----------------------------------------------------

def job_body(i, sim_ms, tag="f"):
    return {"capability": "image.fast",
            "params": {"prompt": f"{tag} {i}", "width": 256, "height": 256, "seed": i,
                       "sim_ms": sim_ms}}


class Ledger:
    """Every submission with its idempotency key and what the head answered;
    acked maps job id -> index of the submission it acknowledged."""

    def __init__(self, url, key):
        self.url, self.key = url, key
        self.acked = {}
        self.answers = []  # (index, status or exception name)
        self.lock = threading.Lock()

    def submit(self, i, body, deadline_s=30, retry=True):
        """Submits with an Idempotency-Key, retrying transport errors, 429 and
        503 (same key) until acknowledged. Returns the job or raises."""
        key = f"fault-{i}-{uuid.uuid4().hex[:8]}"
        c = Client(self.url, self.key, timeout=10)
        deadline = time.monotonic() + deadline_s * SLOW
        try:
            while True:
                try:
                    r = c.post("/v1/jobs", body, headers={"Idempotency-Key": key})
                    status = r.status
                except OSError as e:
                    r, status = None, type(e).__name__
                    c.close()
                with self.lock:
                    self.answers.append((i, status))
                if r is not None and r.status in (200, 201):
                    j = r.json()
                    with self.lock:
                        prev = self.acked.get(j["id"])
                        assert prev in (None, i), f"job {j['id']} acknowledged for {prev} and {i}"
                        self.acked[j["id"]] = i
                    return j
                if r is not None and r.status not in (429, 503):
                    raise AssertionError(f"submit {i}: unexpected answer {r}")
                if not retry or time.monotonic() > deadline:
                    return None
                # A client's retry pause (the head is down, full or busy).
                if r is not None and r.status == 429:
                    time.sleep(min(float(r.header("Retry-After") or 0.2), 0.5))
                else:
                    time.sleep(0.05)
        finally:
            c.close()


def list_all_jobs(client):
    """Every job of the client's tenant, by pages of 500 (bounded)."""
    out, after = [], None
    for _ in range(100):
        path = "/v1/jobs?limit=500" + (f"&after={after}" if after else "")
        r = client.get(path)
        assert r.status == 200, r
        body = r.json()
        out += body["jobs"]
        after = body["next"]
        if not after:
            return out
    raise AssertionError("more than 100 pages of jobs")


def wait_terminal(client, ids, timeout_s):
    """Waits (bounded) until every job in ids is terminal; returns id -> job.
    On time-out, fails naming every job that is not, with its state."""
    final = {}
    deadline = time.monotonic() + timeout_s * SLOW
    todo = list(ids)
    while todo:
        jid = todo[0]
        left = deadline - time.monotonic()
        try:
            r = client.get(f"/v1/jobs/{jid}?wait={max(1, min(5, int(left)))}")
        except OSError:
            r = None
        if r is not None and r.status == 200 and r.json()["state"] in TERMINAL:
            final[jid] = r.json()
            todo.pop(0)
            continue
        if time.monotonic() > deadline:
            stuck = []
            for j in todo:
                g = client.get(f"/v1/jobs/{j}")
                if g.status != 200:
                    stuck.append({"id": j, "http": g.status})
                elif g.json()["state"] not in TERMINAL:
                    stuck.append(g.json())
            desc = "; ".join(
                f"{s.get('id')}:{s.get('state')}/{s.get('phase')} on {s.get('worker_id')} "
                f"attempt {s.get('attempt')}" if "state" in s else f"{s['id']}: HTTP {s['http']}"
                for s in stuck[:20])
            raise AssertionError(f"{len(stuck)} of {len(ids)} acknowledged jobs not terminal "
                                 f"after {timeout_s * SLOW:.0f}s: {desc}")
        if r is not None and r.status != 200:
            raise AssertionError(f"GET job {jid}: {r}")
    return final


def check_ledger(name, client, ledger, proxies, timeout_s=60, all_succeed=True,
                 strays_allowed=False, every_success_observed=True):
    """The checks every scenario ends with. proxies: the LinkProxy objects all
    agents talk through (their view of accepted completions)."""
    ids = sorted(ledger.acked, key=int)
    final = wait_terminal(client, ids, timeout_s)
    listed = list_all_jobs(client)
    seen = {}
    for j in listed:
        seen[j["id"]] = seen.get(j["id"], 0) + 1
    lost = [i for i in ids if i not in seen]
    assert not lost, f"{name}: acknowledged jobs missing from the listing: {lost}"
    twice = [i for i, n in seen.items() if n != 1]
    assert not twice, f"{name}: jobs listed more than once: {twice}"
    not_final = [(j["id"], j["state"]) for j in listed if j["state"] not in TERMINAL]
    assert not not_final, f"{name}: listed jobs not terminal: {not_final}"
    strays = [i for i in seen if i not in ledger.acked]
    if not strays_allowed:
        assert not strays, f"{name}: jobs stored that no submit acknowledged: {strays}"
    # Exactly one terminal state: the state a later read gives is the same one.
    changed = [(i, final[i]["state"], j["state"]) for j in listed for i in [j["id"]]
               if i in final and final[i]["state"] != j["state"]]
    assert not changed, f"{name}: jobs whose terminal state changed: {changed}"

    def accepted_now():
        acc = {}
        for p in proxies:
            assert not p.parse_errors, f"{name}: proxy could not follow HTTP: {p.parse_errors[:3]}"
            for jid, atts in p.accepted_completions().items():
                acc.setdefault(jid, set()).update(atts)
        return acc

    # A job may read succeeded a moment before its 200 has gone back through
    # the proxy: wait (bounded) until every success has been seen there.
    succeeded = [i for i, j in final.items() if j["state"] == "succeeded"]
    if every_success_observed:
        try:
            wait_until(lambda: all(i in accepted_now() for i in succeeded), 5,
                       "the proxy to see every success's 200")
        except AssertionError:
            pass  # reported below, job by job
    accepted = accepted_now()
    dup = {j: sorted(a) for j, a in accepted.items() if len(a) > 1}
    assert not dup, f"{name}: more than one attempt's result accepted (200): {dup}"
    bad = []
    for jid, j in final.items():
        atts = accepted.get(jid, set())
        if j["state"] == "succeeded":
            if atts and atts != {j["attempt"]}:
                bad.append(f"{jid}: accepted attempt {sorted(atts)}, job says {j['attempt']}")
            if not atts and every_success_observed:
                bad.append(f"{jid}: succeeded but no completion was accepted through the proxy")
        elif atts:
            bad.append(f"{jid}: {j['state']} but attempt {sorted(atts)} had a 200 completion")
    assert not bad, f"{name}: results not fenced: {bad[:10]}"
    states = {}
    for j in final.values():
        states[j["state"]] = states.get(j["state"], 0) + 1
    if all_succeed:
        failed = [(i, j["state"], j.get("error")) for i, j in final.items()
                  if j["state"] != "succeeded"]
        assert not failed, f"{name}: jobs that did not succeed: {failed[:10]}"
        for jid in ids[:: max(1, len(ids) // 10)]:  # a sample of the results downloads
            r = client.get(f"/v1/jobs/{jid}/result")
            assert r.status == 200 and r.body.startswith(b"\x89PNG"), (jid, r)
    print(f"{name}: {len(ids)} acknowledged, states {states}, "
          f"{sum(len(a) for a in accepted.values())} completions accepted, "
          f"{len(strays)} unacknowledged stored")
    return final
