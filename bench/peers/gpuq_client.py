"""The client side of the gpuq peer: an Adapter for the shared peers client
(../shared/peers/client.py) that submits no-op jobs (the sim runtime with
sim_ms=0) over gpuq's HTTP API and observes completion by long-poll
(GET /v1/jobs/{id}?wait=&until=end: one answer, when the job ends). Run by
gpuq_peer.py, one process per phase.

Two clients of the same public HTTP/1.1 API, picked by GPUQ_PEER_CLIENT:

  lean     (default) one keep-alive socket, request bytes built once, and of
           each answer only the status line, Content-Length and the one JSON
           field needed (the submit's "id", the job's "state") are read --
           as lean as the shared bstalk.py is for beanstalkd's text protocol;
  httplib  Python's http.client and json for every answer (what a user
           would write first; its header parsing dominates the client's CPU).

In the latency phase (one job at a time, each waited for) both submit with
POST /v1/jobs?wait=30, which answers once the job has ended: one request a
job, as a user who wants the outcome would send. GPUQ_PEER_ONE_REQUEST=0
submits without it and long-polls with GET, as the throughput phases always
do (they submit many before waiting for any).
"""
import http.client
import json
import math
import os
import socket
import sys
import time

sys.path.insert(0, os.environ.get("GPUQ_PEERS_DIR", ""))

import client as peers_client  # noqa: E402  (the shared client)

JOB = {"capability": "image.fast",
       "params": {"prompt": "peers", "width": 64, "height": 64, "steps": 1, "sim_ms": 0}}
CLIENT = os.environ.get("GPUQ_PEER_CLIENT", "lean")


class HttpError(Exception):
    pass


class LeanHttp:
    """A minimal HTTP/1.1 keep-alive client for gpuqd's answers: every answer
    of gpuqd's JSON routes carries Content-Length (a chunked answer or a
    closed connection is an error here, never silently misread)."""

    def __init__(self, port, timeout=90.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    @staticmethod
    def request(method, path, key, body=b""):
        head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n" % (
            method, path, key)
        if body:
            head += "Content-Type: application/json\r\n"
        if body or method == "POST":
            head += "Content-Length: %d\r\n" % len(body)
        return head.encode("ascii") + b"\r\n" + body

    def exchange(self, req):
        """Sends one request, returns (status, body bytes)."""
        self.sock.sendall(req)
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        while end < 0:
            got = self.sock.recv(65536)
            if not got:
                raise HttpError("connection closed before the answer's headers")
            buf += got
            end = buf.find(b"\r\n\r\n")
        head = buf[:end]
        status = int(head[9:12])
        i = head.lower().find(b"\r\ncontent-length:")
        if i < 0:
            raise HttpError("answer %d without Content-Length: %r" % (status, head[:200]))
        j = head.find(b"\r\n", i + 2)
        n = int(head[i + 17:j if j > 0 else len(head)])
        start = end + 4
        while len(buf) < start + n:
            got = self.sock.recv(65536)
            if not got:
                raise HttpError("connection closed inside the answer's body")
            buf += got
        self.buf = buf[start + n:]
        return status, buf[start:start + n]


def field(body, name):
    """The string value of top-level field `name` in one of gpuqd's job
    answers (rendered by json_render_job: "id" first, "state" after the
    params, so search past "priority" for it)."""
    key = b'"' + name + b'":"'
    i = body.find(key, body.find(b'"priority":') if name == b"state" else 0)
    if i < 0:
        raise HttpError("no %s in %r" % (name.decode(), body[:200]))
    i += len(key)
    return body[i:body.index(b'"', i)]


class GpuqBase(peers_client.Adapter):
    in_order = True

    def __init__(self, a):
        datadir = os.path.dirname(a.ready_dir)
        with open(os.path.join(datadir, "admin.key")) as f:
            self.admin = f.read().strip()
        self.port = a.port
        self.one = (getattr(a, "phase", "") == "latency" and
                    os.environ.get("GPUQ_PEER_ONE_REQUEST", "1") != "0")
        self.submit_path = "/v1/jobs?wait=30" if self.one else "/v1/jobs"
        self.ended = {}  # handle -> state its submit's answer showed (one request)

    def wait_ready(self, expected, deadline):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            while time.perf_counter() < deadline:
                c.request("GET", "/v1/workers", headers={"Authorization": "Bearer " + self.admin})
                r = c.getresponse()
                data = r.read()
                if r.status == 200 and sum(1 for w in json.loads(data)["workers"]
                                           if w.get("state") == "ready") >= expected:
                    return True
                time.sleep(0.05)
            return False
        finally:
            c.close()

    def add_tenant(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request("POST", "/v1/tenants",
                      body=json.dumps({"name": "peers-%d" % os.getpid(), "tier": "paid"}),
                      headers={"Authorization": "Bearer " + self.admin,
                               "Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            if r.status != 201:
                raise RuntimeError("tenant add: %d %r" % (r.status, data[:200]))
            return json.loads(data)["key"]
        finally:
            c.close()

    def wait(self, handle, timeout):
        """Long-polls until the job ends (True when it succeeded) or timeout
        runs out (False); each client asks with its own state()."""
        state = self.ended.pop(handle, None)
        if state == "succeeded":
            return True
        if state in ("failed", "cancelled"):
            raise RuntimeError("job %s %s" % (handle, state))
        end = time.perf_counter() + timeout
        while True:
            left = end - time.perf_counter()
            if left <= 0:
                return False
            state, detail = self.state(handle, max(1, min(30, math.ceil(left))))
            if state == "succeeded":
                return True
            if state in ("failed", "cancelled"):
                raise RuntimeError("job %s %s: %r" % (handle, state, detail))


class GpuqLean(GpuqBase):
    def __init__(self, a):
        super().__init__(a)
        self.key = self.add_tenant()
        self.http = LeanHttp(a.port)
        self.submit_req = LeanHttp.request("POST", self.submit_path, self.key,
                                           json.dumps(JOB).encode())
        self.waits = {}

    def submit(self, i):
        status, body = self.http.exchange(self.submit_req)
        if status != 201:
            raise RuntimeError("submit: %d %r" % (status, body[:200]))
        handle = field(body, b"id").decode()
        if self.one:
            self.ended[handle] = field(body, b"state").decode()
        return handle

    def state(self, handle, w):
        req = self.waits.get(w)
        if req is None:
            req = self.waits[w] = ("GET /v1/jobs/%%s?wait=%d&until=end HTTP/1.1\r\n"
                                   "Host: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n"
                                   % (w, self.key))
        status, body = self.http.exchange((req % handle).encode("ascii"))
        if status != 200:
            raise RuntimeError("get %s: %d %r" % (handle, status, body[:200]))
        return field(body, b"state").decode(), body[:300]


class GpuqHttplib(GpuqBase):
    def __init__(self, a):
        super().__init__(a)
        self.key = self.add_tenant()
        self.conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=90)
        self.body = json.dumps(JOB)

    def call(self, method, path, body=None):
        headers = {"Authorization": "Bearer " + self.key}
        if body is not None:
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=body, headers=headers)
        r = self.conn.getresponse()
        payload = r.read()
        return r.status, (json.loads(payload) if payload else None)

    def submit(self, i):
        status, job = self.call("POST", self.submit_path, self.body)
        if status != 201:
            raise RuntimeError("submit: %d %r" % (status, job))
        if self.one:
            self.ended[job["id"]] = job["state"]
        return job["id"]

    def state(self, handle, w):
        status, job = self.call("GET", "/v1/jobs/%s?wait=%d&until=end" % (handle, w))
        if status != 200:
            raise RuntimeError("get %s: %d %r" % (handle, status, job))
        return job["state"], job.get("error")


CLIENTS = {"lean": GpuqLean, "httplib": GpuqHttplib}
if CLIENT not in CLIENTS:
    sys.exit("gpuq_client: GPUQ_PEER_CLIENT=%r: use lean or httplib" % CLIENT)
peers_client.ADAPTERS["gpuq"] = CLIENTS[CLIENT]

if __name__ == "__main__":
    sys.exit(peers_client.main())
