"""GET /v1/jobs/{id}/trace (R36) and `gpuq trace`: every step of a job with
its time — of a job that ran, of one retried after a failure on another GPU,
after a restart (rebuilt from the store's attempts) — scoped to its tenant."""

import subprocess

from gpuq_harness import FakeWorker, binary, wait_until

JOB = {"capability": "image.fast", "params": {"prompt": "a fox", "width": 512, "height": 512}}


def steps(trace):
    return [s["step"] for s in trace["steps"]]


def step(trace, name, nth=0):
    return [s for s in trace["steps"] if s["step"] == name][nth]


def without_admitted(trace):
    """The steps' names but "admitted", after checking that it comes once,
    after "accepted", and that the steps are in time order. A job goes to the
    scheduler while its insert commits, so it may be placed (even assigned)
    before it is admitted, and its trace shows each step where it happened."""
    names = steps(trace)
    assert names.count("admitted") == 1, trace
    assert names.index("admitted") > names.index("accepted"), trace
    times = [s["at_ms"] for s in trace["steps"]]
    assert times == sorted(times), trace
    return [n for n in names if n != "admitted"]


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
    # An agent restarts the runtime after an oom (R27) and says when it is
    # back: until that report gpu0 takes nothing new.
    assert w0.heartbeat().status == 200
    # The retry goes back to gpu0, the only GPU (which failed it), once its
    # failure is stored; gpu1 comes after that and takes it over. Were gpu1
    # there first, the retry would go straight to it (seen once in a loaded
    # run: no "retry moved off" in the placement's reason).
    wait_until(lambda: without_admitted(c.get(f"/v1/jobs/{jid}/trace").json())[-2:] ==
               ["retry", "placed"], 20, "the retry placed back on gpu0")
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
    assert without_admitted(t) == ["accepted", "queued", "placed", "assigned", "started",
                                   "finished"], t
    assert t["steps"][-1]["at_ms"] - t["steps"][0]["at_ms"] < 60000
    placed = step(t, "placed")
    assert placed["worker"] == "gpu0" and placed["reason"]
    assert placed["candidates"][0]["worker"] == "gpu0"
    assert "score_s" in placed["candidates"][0]
    assert t["steps"][-1]["state"] == "succeeded"


def test_first_steps_of_a_queued_job(head):
    """The first three steps (held compactly for every queued job) carry what
    they said when they happened: the job's capability, model, lane, tier and
    cost; that it is durable; its ETA, or why it waits when no GPU can take it."""
    c = head.client(head.add_tenant("acme"))
    jid = c.post("/v1/jobs", JOB).json()["id"]
    job = c.get(f"/v1/jobs/{jid}").json()
    t = c.get(f"/v1/jobs/{jid}/trace").json()
    assert t["state"] == "queued" and t["source"] == "memory" and t["dropped"] == 0, t
    assert steps(t) == ["accepted", "admitted", "queued"], t
    acc, adm, que = t["steps"]
    assert acc["capability"] == "image.fast" and acc["model"] == job["model"], acc
    assert acc["lane"] == job["lane"] and acc["tier"] in ("free", "paid"), acc
    assert isinstance(acc["cost_s"], (int, float)) and acc["cost_s"] > 0, acc
    assert adm["detail"] == "stored durably; 201 sent", adm
    assert que["waiting_reason"], que  # no GPU yet
    assert acc["at_ms"] <= adm["at_ms"] <= que["at_ms"], t
    # With a GPU, the next job's queued step carries its ETA.
    FakeWorker(head, head.add_worker_token(), worker_id="gpu0").start()
    jid2 = c.post("/v1/jobs", JOB).json()["id"]
    que2 = step(c.get(f"/v1/jobs/{jid2}/trace").json(), "queued")
    assert "eta_finish_s" in que2, que2
    assert que2["eta_start_s"] <= que2["eta_finish_s"], que2


def test_a_waited_submit_says_its_201_waits_for_the_end(head):
    """POST /v1/jobs?wait=S answers at the job's end (or when S runs out), not
    at its insert's commit: the admitted step says so; a plain submit's does not."""
    c = head.client(head.add_tenant("acme"))
    r = c.post("/v1/jobs?wait=1", JOB)  # no GPU: the wait runs out, the job stays queued
    assert r.status == 201 and r.json()["state"] == "queued", r
    waited = step(c.get(f"/v1/jobs/{r.json()['id']}/trace").json(), "admitted")
    assert waited["detail"] == "stored durably; 201 sent when the job ends or the wait runs out", \
        waited
    plain = c.post("/v1/jobs", JOB).json()["id"]
    assert step(c.get(f"/v1/jobs/{plain}/trace").json(), "admitted")["detail"] == \
        "stored durably; 201 sent"


def test_trace_of_a_retried_job_and_after_restart(head):
    c, jid = run_retried_job(head)
    t = c.get(f"/v1/jobs/{jid}/trace").json()
    got = without_admitted(t)
    k = got.index("retry")
    assert got[:k + 1] == ["accepted", "queued", "placed", "assigned", "model_load", "started",
                           "retry"], t
    # Then placed again (the scheduler may place it more than once before a GPU takes it),
    # assigned to gpu1, started there, finished.
    assert got[k + 1] == "placed" and got[-4:] == ["placed", "assigned", "started", "finished"], t
    assert t["steps"][-4]["worker"] == "gpu1"
    assert "retry" in t["steps"][-4]["reason"]
    retry = step(t, "retry")
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


# --- the trace memory cap ------------------------------------------------------

CAP_BYTES = 16384
CAP_CONFIG = f"[metrics]\ntrace_max_bytes = {CAP_BYTES}\ntrace_max_steps = 8\n"


def metric(head, name):
    for line in head.client(None).get("/metrics").body.decode().splitlines():
        if line.split(" ")[0] == name:
            return float(line.split(" ")[1])
    raise AssertionError(f"{name} not in /metrics")


def test_trace_steps_and_memory_are_capped(head_factory):
    head = head_factory(config_text=CAP_CONFIG)
    c = head.client(head.add_tenant("acme"))
    w = FakeWorker(head, head.add_worker_token(), worker_id="gpu0").start()
    # One job with more steps than the cap: the later ones are dropped, the finish kept.
    jid = c.post("/v1/jobs", JOB).json()["id"]
    a = wait_until(lambda: w.poll(wait=2), 20, "an assignment")
    assert w.progress(a, "loading", 0.0).status == 200
    for p in (0.1, 0.3, 0.55, 0.8, 0.95):
        assert w.progress(a, "generating", p).status == 200
    assert w.complete(a).status == 200
    wait_until(lambda: c.get(f"/v1/jobs/{jid}").json()["state"] == "succeeded", 20,
               "the job to succeed")
    t = c.get(f"/v1/jobs/{jid}/trace").json()
    assert len(t["steps"]) == 9 and t["dropped"] > 0, t
    assert without_admitted(t)[:2] == ["accepted", "queued"], t
    assert steps(t)[-1] == "finished" and t["steps"][-1]["state"] == "succeeded", t

    # Many jobs: the oldest traces go, the memory stays under the cap.
    ids = []
    for i in range(150):
        r = c.post("/v1/jobs", dict(JOB, params={"prompt": f"job {i} " + "x" * 200}))
        assert r.status == 201, r
        ids.append(r.json()["id"])
    held = metric(head, "gpuq_trace_memory_bytes")
    assert 0 < held <= CAP_BYTES, held
    assert metric(head, "gpuq_traces_evicted_total") > 0
    assert metric(head, "gpuq_traces") < len(ids)
    # An evicted job's trace is rebuilt from the store; the newest is whole in memory.
    old = c.get(f"/v1/jobs/{ids[0]}/trace").json()
    assert old["source"] == "store" and steps(old)[0] == "accepted", old
    new = c.get(f"/v1/jobs/{ids[-1]}/trace").json()
    assert new["source"] == "memory", new
    assert without_admitted(new)[:2] == ["accepted", "queued"], new


# --- with the real agent and runtime --------------------------------------------

def test_retry_on_another_gpu_with_the_real_agent(head_factory, tmp_path):
    """gpuq-agent with two simulated GPUs and gpuq-sim-runtime; the runtime's
    one-shot fault file makes the job's first attempt fail with oom. The job
    succeeds on the other GPU; its trace and /metrics show the retry."""
    from test_agent import HEAD_CONFIG, Agent, submit, wait_job
    from test_metrics import value
    head = head_factory(config_text=HEAD_CONFIG)
    agent = Agent(head, tmp_path, "faulty", gpus=2).start()
    try:
        agent.wait_ready()
        c = head.client(head.add_tenant("acme"))
        before = head.client(None).get("/metrics").body.decode()
        with open(agent.fault_file, "w") as f:  # one-shot: the next job takes it
            f.write("oom\n")
        jid = submit(c, {"capability": "image.fast", "params": {"prompt": "a fox"}})["id"]
        j = wait_job(c, jid, 40)
        assert j["state"] == "succeeded" and j["attempt"] == 2, j
        after = head.client(None).get("/metrics").body.decode()
    finally:
        agent.stop()
    t = c.get(f"/v1/jobs/{jid}/trace").json()
    got = steps(t)
    assert got.count("retry") == 1 and got[-1] == "finished", t
    retry = t["steps"][got.index("retry")]
    assert retry["attempt"] == 1 and retry["error_class"] == "oom", retry
    assigned = [s for s in t["steps"] if s["step"] == "assigned"]
    assert [s["attempt"] for s in assigned] == [1, 2], t
    assert assigned[0]["worker"] == retry["worker"] != assigned[1]["worker"], t
    assert assigned[1]["worker"] in agent.worker_ids()
    assert got.index("retry") < got.index("assigned", got.index("retry")), t
    assert t["steps"][-1]["state"] == "succeeded"
    # The counters moved by exactly this job's retry and success.
    oom = {"class": "oom"}
    assert value(after, "gpuq_attempt_failures_total", **oom) == \
        value(before, "gpuq_attempt_failures_total", **oom) + 1
    assert value(after, "gpuq_job_retries_total") == value(before, "gpuq_job_retries_total") + 1
    assert value(after, "gpuq_jobs_finished_total", state="succeeded") == \
        value(before, "gpuq_jobs_finished_total", state="succeeded") + 1
    assert value(after, "gpuq_dead_letters_total") == value(before, "gpuq_dead_letters_total")
    assert value(after, "gpuq_jobs", state="succeeded") == 1
    assert value(after, "gpuq_jobs", state="queued") == 0
