"""Admission and fair share on a simulated fleet: a real gpuqd and a real
gpuq-agent with three simulated GPUs (one reserved for interactive work) and
the sim runtime. Two batch tenants flood the batch lane at weights 2:1 beside
an interactive tenant: the GPU-seconds they get are in order, no interactive
job waits behind a batch job that had not started, a 429 carries Retry-After
and a body saying why, and a client that waits Retry-After is admitted. A job
no wait makes admissible gets a 422 naming why, and nothing is stored; a batch is
admitted all or nothing."""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpuq_harness import SLOW, Client, wait_until  # noqa: E402
from test_agent import Agent  # noqa: E402

RUN_MS = 500   # every job runs this long on the sim runtime
HEAD_CONFIG = """
[workers]
heartbeat_ms = 200
ttl_ms = 5000
[breaker]
failures = 0
[model.image-v2]
run_s = 0.5
[admission]
reserved_gpus = 1
batch_max_wait_s = 4
interactive_max_wait_s = 60
throughput_window_s = 3600
[tenant.big]
weight = 2
[tenant.small]
weight = 1
"""
# run_s = 0.5: the estimate of a 1024x1024, 30-step job matches what the sim
# runtime takes (sim_ms), so costs are what the test expects. A throughput
# window longer than the test keeps the lanes' nominal capacity in use (the
# agent's 3 GPUs: 3 GPU-s/s interactive, 2 GPU-s/s batch).


def job(lane, tag):
    return {"capability": "image.fast", "lane": lane, "idempotency_key": tag,
            "params": {"prompt": tag, "width": 1024, "height": 1024, "steps": 30,
                       "sim_ms": RUN_MS}}


class Flooder:
    """Clients of one tenant that keep submitting batch jobs, honouring
    Retry-After; each refused job is retried with the same idempotency key."""

    def __init__(self, head, key, name, clients=3):
        self.head, self.key, self.name, self.clients = head, key, name, clients
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ids = []
        self.refusals = []        # 429 bodies
        self.retries = 0          # retries after waiting Retry-After
        self.retries_admitted = 0  # of them, admitted on that retry
        self.errors = []
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(clients)]

    def run(self, n):
        c = Client(self.head.url, self.key, timeout=30)
        i = 0
        while not self.stop.is_set():
            body = job("batch", f"{self.name}-{n}-{i}")
            retried = False
            while not self.stop.is_set():
                r = c.post("/v1/jobs", body)
                with self.lock:
                    self.retries += retried
                    if r.status == 201:
                        self.ids.append(r.json()["id"])
                        self.retries_admitted += retried
                    elif r.status == 429:
                        self.refusals.append((r.header("Retry-After"), r.json()))
                    else:
                        self.errors.append(r)
                        return
                if r.status == 201:
                    break
                retried = True
                self.stop.wait(float(r.header("Retry-After")))
            i += 1

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60 * SLOW)


def test_two_tenants_flood_beside_interactive(head_factory, tmp_path):
    head = head_factory(config_text=HEAD_CONFIG)
    agent = Agent(head, tmp_path, "adm", gpus=3).start()
    try:
        agent.wait_ready()
        big = Flooder(head, head.add_tenant("big"), "big").start()
        small = Flooder(head, head.add_tenant("small"), "small").start()
        ui = Client(head.url, head.add_tenant("ui"))
        # Both tenants' queues fill to their share of the batch bound.
        wait_until(lambda: len(big.refusals) >= 3 and len(small.refusals) >= 3, 30 * SLOW,
                   "both batch tenants to be told to wait (429)")
        # A batch is admitted all or nothing: with small's share of the lane
        # full, 20 more jobs get a 429 and none of them is queued.
        jobs = [job("batch", f"b{i}") for i in range(20)]
        for j in jobs:
            del j["idempotency_key"]
        r = Client(head.url, small.key).post("/v1/batches", {"jobs": jobs})
        assert r.status == 429, r
        assert int(r.header("Retry-After")) >= 1 and r.json()["reason"] == "lane_wait"
        assert Client(head.url, small.key).get("/v1/batches").json()["batches"] == []
        t0 = time.time() * 1000
        inter = []
        for i in range(25):
            r = ui.post("/v1/jobs", job("interactive", f"ui-{i}"))
            assert r.status == 201, r
            inter.append(r.json()["id"])
            time.sleep(0.4)
        big.join()
        small.join()
        t1 = time.time() * 1000
        assert not big.errors and not small.errors, (big.errors + small.errors)[:2]

        # Every interactive job ran; none waited behind a batch job that
        # started on its GPU after it was submitted (the batch job would have
        # run to its end first: RUN_MS later).
        def done(i):
            r = ui.get(f"/v1/jobs/{i}?wait=5")
            return r.json() if r.json()["state"] == "succeeded" else None

        inter_jobs = [wait_until(lambda i=i: done(i), 60 * SLOW, f"interactive job {i}")
                      for i in inter]
        batch = []
        for f in (big, small):
            c = Client(head.url, f.key)
            for i in f.ids:
                j = c.get(f"/v1/jobs/{i}").json()
                j["tenant_name"] = f.name
                batch.append(j)
        for ij in inter_jobs:
            ahead = [b for b in batch
                     if b["worker_id"] == ij["worker_id"] and b["started_ms"]
                     and ij["created_ms"] + 200 * SLOW < b["started_ms"] < ij["started_ms"]]
            assert not ahead, (ij, ahead[:2])

        # Shares in order: while both flooded, big (weight 2) got about twice
        # the GPU-seconds of small (weight 1).
        def gpu_s(name):
            return sum(b["cost_s"] for b in batch
                       if b["tenant_name"] == name and b["started_ms"]
                       and t0 <= b["started_ms"] <= t1)

        got_big, got_small = gpu_s("big"), gpu_s("small")
        assert got_small > 0 and got_big >= 1.3 * got_small, (got_big, got_small)

        # The 429s: Retry-After in whole seconds, a body saying why and when;
        # a client that waited it was admitted on that retry.
        ra, body = big.refusals[0]
        assert int(ra) >= 1
        assert body["error"]["code"] == "overloaded"
        assert body["reason"] == "lane_wait" and body["lane"] == "batch"
        assert body["retry_after_s"] > 0 and body["backlog_gpu_s"] > 0
        assert "bound" in body["error"]["message"]
        for f in (big, small):
            assert f.retries_admitted >= 1
            assert f.retries_admitted >= 0.8 * f.retries, (f.name, f.retries, f.retries_admitted)
        # Every 429 is counted in /metrics, by lane (the batch above is one more).
        text = Client(head.url).get("/metrics").body.decode()
        throttled = [ln for ln in text.splitlines()
                     if ln.startswith('gpuq_http_throttled_total{lane="batch"}')]
        assert throttled, text[:400]
        counted = float(throttled[0].split()[-1])
        assert counted >= len(big.refusals) + len(small.refusals) + 1, (counted, throttled)

        # One job that no wait makes admissible: 422 naming why; nothing stored.
        huge = job("batch", "huge")
        huge["params"]["steps"] = 500  # 0.5 s x 500/30 > the 4 s bound
        r = Client(head.url, small.key).post("/v1/jobs", huge)
        assert r.status == 422, r
        assert r.json()["reason"] == "job_cost"
        assert "exceeds the batch lane's wait bound" in r.json()["error"]["message"]
        listed = Client(head.url, small.key).get("/v1/jobs?limit=500").json()["jobs"]
        assert listed and all(j["idempotency_key"] != "huge" for j in listed)
        for f in (big, small):
            c = Client(head.url, f.key)
            for i in f.ids:
                c.delete(f"/v1/jobs/{i}")
    finally:
        agent.stop()
