"""GET /v1/jobs/{id}/trace (R36) and `gpuq trace`: every step of a job with
its time — of a job that ran, of one retried after a failure on another GPU,
after a restart (rebuilt from the store's attempts) — scoped to its tenant."""

import subprocess

from gpuq_harness import FakeWorker, binary, wait_until

JOB = {"capability": "image.fast", "params": {"prompt": "a fox", "width": 512, "height": 512}}


def steps(trace):
    return [s["step"] for s in trace["steps"]]


def run_retried_job(head):
    """A job that fails with oom on gpu0 and succeeds on gpu1. Returns (client, id)."""
    c = head.client(head.add_tenant("acme"))
    w0 = FakeWorker(head, head.add_worker_token(), worker_id="gpu0").start()
    r = c.post("/v1/jobs", JOB)
    assert r.status == 201, r
    jid = r.json()["id"]
    a = wait_until(lambda: w0.poll(wait=2), 20, "the first assignment")
    assert w0.progress(a, "loading", 0.0).status == 200
    assert w0.progress(a, "generating", 0.3).status == 200
    assert w0.fail(a, cls="oom", message="CUDA out of memory").status == 200
    w1 = FakeWorker(head, head.add_worker_token("more"), worker_id="gpu1").start()
    b = wait_until(lambda: w1.poll(wait=2), 20, "the retry on gpu1")
    assert w1.progress(b, "generating", 0.6).status == 200
    assert w1.complete(b).status == 200
    wait_until(lambda: c.get(f"/v1/jobs/{jid}").json()["state"] == "succeeded", 20,
               "the job to succeed")
    return c, jid


def test_trace_of_a_job_that_ran(head):
    c = head.client(head.add_tenant("acme"))
    w = FakeWorker(head, head.add_worker_token(), worker_id="gpu0").start()
    r = c.post("/v1/jobs", JOB)
    jid = r.json()["id"]
    a = wait_until(lambda: w.poll(wait=2), 20, "an assignment")
    assert w.progress(a, "generating", 0.5).status == 200
    assert w.complete(a).status == 200
    t = c.get(f"/v1/jobs/{jid}/trace")
    assert t.status == 200, t
    t = t.json()
    assert t["job"] == jid and t["state"] == "succeeded" and t["source"] == "memory"
    assert steps(t) == ["accepted", "admitted", "queued", "placed", "assigned", "started",
                        "finished"], t
    times = [s["at_ms"] for s in t["steps"]]
    assert times == sorted(times) and times[-1] - times[0] < 60000
    placed = t["steps"][3]
    assert placed["worker"] == "gpu0" and placed["reason"]
    assert placed["candidates"][0]["worker"] == "gpu0"
    assert "score_s" in placed["candidates"][0]
    assert t["steps"][-1]["state"] == "succeeded"


def test_trace_of_a_retried_job_and_after_restart(head):
    c, jid = run_retried_job(head)
    t = c.get(f"/v1/jobs/{jid}/trace").json()
    got = steps(t)
    k = got.index("retry")
    assert got[:k + 1] == ["accepted", "admitted", "queued", "placed", "assigned", "model_load",
                           "started", "retry"], t
    # Then placed again (the scheduler may place it more than once before a GPU takes it),
    # assigned to gpu1, started there, finished.
    assert got[k + 1] == "placed" and got[-4:] == ["placed", "assigned", "started", "finished"], t
    assert t["steps"][-4]["worker"] == "gpu1"
    assert "retry" in t["steps"][-4]["reason"]
    retry = t["steps"][k]
    assert retry["attempt"] == 1 and retry["worker"] == "gpu0"
    assert retry["error_class"] == "oom" and "out of memory" in retry["error"]
    second = [s for s in t["steps"] if s["step"] == "assigned"][1]
    assert second["worker"] == "gpu1" and second["attempt"] == 2

    # After a restart the memory is gone: the store's attempts remain.
    head.stop()
    head.start()
    c2 = head.client(c.key)
    t = c2.get(f"/v1/jobs/{jid}/trace").json()
    assert t["source"] == "store", t
    got = steps(t)
    assert got == ["accepted", "assigned", "retry", "assigned", "attempt_ended", "finished"], t
    assert t["steps"][2]["error_class"] == "oom" and t["steps"][2]["worker"] == "gpu0"
    assert t["steps"][4]["worker"] == "gpu1" and t["steps"][4]["outcome"] == "ok"


def test_trace_is_tenant_scoped(head):
    c = head.client(head.add_tenant("acme"))
    other = head.client(head.add_tenant("other"))
    jid = c.post("/v1/jobs", JOB).json()["id"]
    assert c.get(f"/v1/jobs/{jid}/trace").status == 200
    r = other.get(f"/v1/jobs/{jid}/trace")
    assert r.status == 404, r
    assert r.json()["error"]["code"] == "not_found"
    assert head.admin().get(f"/v1/jobs/{jid}/trace").status == 200
    assert head.client(None).get(f"/v1/jobs/{jid}/trace").status == 401
    assert c.get("/v1/jobs/999999/trace").status == 404


def test_gpuq_trace_prints_a_timeline(head):
    c, jid = run_retried_job(head)
    p = subprocess.run([binary("gpuq"), "--url", head.url, "--key", c.key, "trace", jid],
                       capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    lines = out.splitlines()
    assert lines[0].startswith(f"job {jid}: succeeded, "), out
    assert lines[1].split()[:2] == ["+0.000s", "accepted"], out
    assert any("retry" in l and "attempt 1 on gpu0: error: oom: CUDA out of memory" in l
               for l in lines), out
    assert any("placed" in l and "on gpu1" in l for l in lines), out
    assert lines[-1].split()[1] == "finished" and "succeeded" in lines[-1], out
    p = subprocess.run([binary("gpuq"), "--url", head.url, "--key", c.key, "trace", "424242"],
                       capture_output=True, timeout=30)
    assert p.returncode == 1 and b"not_found" in p.stderr, p
