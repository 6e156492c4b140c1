"""The client side of the gpuq peer: an Adapter for the shared peers client
(../shared/peers/client.py) that submits no-op jobs (the sim runtime with
sim_ms=0) over gpuq's HTTP API and observes completion by long-poll
(GET /v1/jobs/{id}?wait=&until=end: one answer, when the job ends). Run by
gpuq_peer.py, one process per phase."""
import http.client
import json
import math
import os
import sys
import time

sys.path.insert(0, os.environ.get("GPUQ_PEERS_DIR", ""))

import client as peers_client  # noqa: E402  (the shared client)

JOB = {"capability": "image.fast",
       "params": {"prompt": "peers", "width": 64, "height": 64, "steps": 1, "sim_ms": 0}}


class Gpuq(peers_client.Adapter):
    in_order = True

    def __init__(self, a):
        datadir = os.path.dirname(a.ready_dir)
        with open(os.path.join(datadir, "admin.key")) as f:
            self.admin = f.read().strip()
        self.conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=90)
        status, t = self.call("POST", "/v1/tenants",
                              {"name": "peers-%d" % os.getpid(), "tier": "paid"}, self.admin)
        if status != 201:
            raise RuntimeError("tenant add: %d %r" % (status, t))
        self.key = t["key"]
        self.body = json.dumps(JOB)

    def call(self, method, path, body=None, key=None):
        headers = {"Authorization": "Bearer " + (key or self.key)}
        data = None
        if body is not None:
            data = body if isinstance(body, str) else json.dumps(body)
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=data, headers=headers)
        r = self.conn.getresponse()
        payload = r.read()
        return r.status, (json.loads(payload) if payload else None)

    def wait_ready(self, expected, deadline):
        while time.perf_counter() < deadline:
            status, v = self.call("GET", "/v1/workers", key=self.admin)
            if status == 200 and sum(1 for w in v["workers"]
                                     if w.get("state") == "ready") >= expected:
                return True
            time.sleep(0.05)
        return False

    def submit(self, i):
        status, job = self.call("POST", "/v1/jobs", self.body)
        if status != 201:
            raise RuntimeError("submit: %d %r" % (status, job))
        return job["id"]

    def wait(self, handle, timeout):
        end = time.perf_counter() + timeout
        while True:
            left = end - time.perf_counter()
            if left <= 0:
                return False
            w = max(1, min(30, math.ceil(left)))
            status, job = self.call("GET", "/v1/jobs/%s?wait=%d&until=end" % (handle, w))
            if status != 200:
                raise RuntimeError("get %s: %d %r" % (handle, status, job))
            if job["state"] == "succeeded":
                return True
            if job["state"] in ("failed", "cancelled"):
                raise RuntimeError("job %s %s: %r" % (handle, job["state"], job.get("error")))


peers_client.ADAPTERS["gpuq"] = Gpuq

if __name__ == "__main__":
    sys.exit(peers_client.main())
