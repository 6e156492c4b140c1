"""Queued jobs at rest (issue 20): the head keeps a queued job nobody waits on
in a compact record and brings it back in full when it is needed. What a user
relies on must not change: a job reads back the same before and after it
rests and across a kill -9, an idempotent replay still finds it (and still
refuses another body under the same key), and every resting job still runs.
Real gpuqd on 127.0.0.1:0 in a temp dir."""

import time

from gpuq_harness import FakeWorker, wait_until

JOB = {"capability": "image.fast", "params": {"prompt": "a fox", "width": 512, "height": 512}}

# Fields that are the job itself (the ETA and waiting reason are computed when read).
STABLE = ("id", "state", "capability", "model", "params", "lane", "priority", "created_ms",
          "cost_s", "idempotency_key", "deadline", "timeout_s", "attempts")


def stable(job):
    return {k: job.get(k) for k in STABLE}


def at_rest(head):
    for line in head.admin().get("/metrics").body.decode().splitlines():
        if line.startswith("gpuq_jobs_at_rest "):
            return int(line.split()[1])
    raise AssertionError("no gpuq_jobs_at_rest in /metrics")


def submit_all(c):
    bodies = [
        JOB,
        dict(JOB, idempotency_key="order-42"),
        dict(JOB, lane="batch", params=dict(JOB["params"], prompt="a heron", seed=3)),
        dict(JOB, timeout_s=30),
        # A deadline puts a job on the timed list: it stays held in full.
        dict(JOB, deadline=int(time.time() * 1000) + 3_600_000),
    ]
    jobs = []
    for b in bodies:
        r = c.post("/v1/jobs", b)
        assert r.status == 201, r
        jobs.append(r.json())
    return bodies, jobs


def test_resting_jobs_read_back_the_same_replay_and_run(head):
    key = head.add_tenant("acme")
    c = head.client(key)
    bodies, jobs = submit_all(c)
    first = {j["id"]: stable(j) for j in jobs}
    # Answered 201: the four without a deadline rest compactly (not the timed one).
    assert at_rest(head) == 4
    # Read back (brings each in full), after a sweep could have put them at rest again.
    for j in jobs:
        assert stable(c.get(f"/v1/jobs/{j['id']}").json()) == first[j["id"]]

    head.kill9()
    head.start()
    c = head.client(key)
    # Recovery put the four queued jobs without a deadline at rest.
    wait_until(lambda: "4 held at rest (compact), 1 in full" in head.tail(), 10,
               "the recovery log line counting jobs at rest")
    assert at_rest(head) == 4
    for j in jobs:
        assert stable(c.get(f"/v1/jobs/{j['id']}").json()) == first[j["id"]]
    listed = {j["id"]: stable(j) for j in c.get("/v1/jobs").json()["jobs"]}
    assert listed == first

    # Idempotency across rest and restart: the same body finds the job, another is refused.
    again = c.post("/v1/jobs", bodies[1])
    assert again.status == 200 and again.json()["id"] == jobs[1]["id"], again
    other = c.post("/v1/jobs", dict(bodies[1], params=dict(JOB["params"], prompt="a wolf")))
    assert other.status == 409, other

    # The queue counts include resting jobs.
    metrics = head.admin().get("/metrics").body.decode()
    assert 'gpuq_jobs{state="queued"} 5' in metrics

    # Every job runs: a worker gets each once, with its params intact.
    w = FakeWorker(head, head.add_worker_token()).start()
    seen = {}
    for _ in range(len(jobs)):
        a = w.poll(wait=10)
        assert a is not None, "a queued job was not assigned"
        seen[a["job_id"]] = a
        assert w.complete(a).status == 200
    assert sorted(seen) == sorted(j["id"] for j in jobs)
    for j in jobs:
        assert seen[j["id"]]["params"] == j["params"]
        wait_until(lambda: c.get(f"/v1/jobs/{j['id']}").json()["state"] == "succeeded", 10,
                   f"job {j['id']} succeeded")
