"""Early assignments (docs/protocol-worker.md, "Early assignments"): an agent
that polls with early=1 gets its job before the assignment is durable, with
the head's epoch, and echoes the epoch on every report. What a user relies
on: kill -9 of gpuqd right after such an assignment loses no job (it runs
again after the restart), and no report of the attempt the dead head handed
out is accepted — not even when the new head hands out the same attempt
number to the same worker — while the new attempt completes normally.

And GET /v1/jobs/{id}?wait=S&until=end: a client waiting for the outcome gets
one answer, when the job ends, not one per change on the way."""
import json
import os
import re
import sqlite3
import threading

import pytest
from faultkit import Tmpfs
from gpuq_harness import SLOW, Client, FakeWorker, Head, tiny_png, wait_until
from test_agent import HEAD_CONFIG, Agent, Proxy, submit, wait_job
from test_trace import step, without_admitted

JOB = {"capability": "image.fast", "params": {"prompt": "a fox", "sim_ms": 0}}


def poll_early(w, wait=5):
    r = w.c.get(f"/v1/agent/assignments?worker_id={w.id}&wait={wait}&early=1")
    assert r.status == 200, r
    body = r.json()
    assert len(body["assignments"]) == 1, body
    return body["epoch"], body["assignments"][0]


def complete(w, a, epoch, attempt=None, data=None):
    att = a["attempt"] if attempt is None else attempt
    return w.c.request(
        "POST",
        f"/v1/agent/jobs/{a['job_id']}/complete?worker_id={w.id}&attempt={att}"
        f"&load_ms=0&run_ms=10&epoch={epoch}",
        body=data or tiny_png(), raw=True, headers={"Content-Type": "image/png"})


def outcome_batch(w, a, epoch, attempt, data):
    head = {"protocol": 1, "outcomes": [
        {"job_id": a["job_id"], "worker_id": w.id, "attempt": attempt,
         "content_type": "image/png", "bytes": len(data), "epoch": epoch}]}
    body = json.dumps(head, separators=(",", ":")).encode() + b"\n" + data
    r = w.c.request("POST", "/v1/agent/outcomes", body=body, raw=True,
                    headers={"Content-Type": "application/x-gpuq-outcomes"})
    assert r.status == 200, r
    return r.json()["results"][0]


def test_plain_poll_names_no_epoch(head_factory):
    head = head_factory(HEAD_CONFIG)
    c = head.client(head.add_tenant("acme"))
    w = FakeWorker(head, head.add_worker_token()).start()
    job = submit(c, JOB)
    r = w.c.get(f"/v1/agent/assignments?worker_id={w.id}&wait=5")
    assert r.status == 200 and "epoch" not in r.json(), r
    a = r.json()["assignments"][0]
    assert a["job_id"] == job["id"]
    # Reports without an epoch are fenced by worker and attempt, as before.
    assert w.complete(a).status == 200
    assert c.get(f"/v1/jobs/{job['id']}").json()["state"] == "succeeded"


def test_report_with_a_malformed_epoch_is_refused_naming_it(head_factory):
    head = head_factory(HEAD_CONFIG)
    submit(head.client(head.add_tenant("acme")), JOB)
    w = FakeWorker(head, head.add_worker_token()).start()
    epoch, a = poll_early(w)
    assert len(epoch) == 16
    # 17 characters; not hex digits; all zeros (no head draws 0).
    for bad in ("0123456789abcdef0", "0123456789abcdeg", "0000000000000000"):
        r = complete(w, a, bad)
        assert r.status == 400 and r.json()["error"]["field"] == "epoch", (bad, r)
    data = tiny_png()
    head_line = {"protocol": 1, "outcomes": [
        {"job_id": a["job_id"], "worker_id": w.id, "attempt": a["attempt"],
         "content_type": "image/png", "bytes": len(data), "epoch": ""}]}
    r = w.c.request("POST", "/v1/agent/outcomes",
                    body=json.dumps(head_line).encode() + b"\n" + data, raw=True,
                    headers={"Content-Type": "application/x-gpuq-outcomes"})
    assert r.status == 400 and r.json()["error"]["field"] == "outcomes[0].epoch", r
    # Refused whole: the attempt still completes with the right epoch.
    assert complete(w, a, epoch).status == 200


def test_kill9_after_early_assignment_reruns_the_job_and_fences_the_old_epoch(head_factory):
    head = head_factory(HEAD_CONFIG)
    tenant = head.add_tenant("acme")
    token = head.add_worker_token()
    c = head.client(tenant)
    w = FakeWorker(head, token, "gpu-a").start()
    jobs = [submit(c, JOB)["id"] for _ in range(3)]
    # The first job assigned early; the head dies at once, so its assignment
    # commit may or may not have reached the disk: both must hold below.
    old_epoch, old = poll_early(w)
    assert old["job_id"] == jobs[0] and old["attempt"] == 1, old
    head.kill9()
    head.start()
    c = head.client(tenant)
    w = FakeWorker(head, token, "gpu-a").start()  # same worker id, as a restarted agent
    # Every job submitted is still there, and the assigned one is queued again.
    assert {c.get(f"/v1/jobs/{j}").json()["state"] for j in jobs} == {"queued"}
    new_epoch, new = poll_early(w)
    assert new_epoch != old_epoch
    assert new["job_id"] == old["job_id"], (old, new)
    # The new head may hand out the very attempt number the dead one did (it
    # never stored it): reports naming the old epoch are refused all the same.
    for att in {old["attempt"], new["attempt"]}:
        r = complete(w, new, old_epoch, attempt=att, data=tiny_png(seed=3))
        assert r.status == 409 and r.json()["error"]["code"] == "stale_attempt", r
        assert r.json()["error"]["field"] == "epoch", r
        res = outcome_batch(w, new, old_epoch, att, tiny_png(seed=4))
        assert res["status"] == 409 and res["error"]["code"] == "stale_attempt", res
    r = w.c.post(f"/v1/agent/jobs/{new['job_id']}/fail?epoch={old_epoch}", {
        "protocol": 1, "worker_id": w.id, "attempt": new["attempt"], "class": "oom",
        "message": "out of memory"})
    assert r.status == 409, r
    r = w.c.post(f"/v1/agent/jobs/{new['job_id']}/progress?epoch={old_epoch}", {
        "protocol": 1, "worker_id": w.id, "attempt": new["attempt"], "phase": "generating",
        "progress": 0.5})
    assert r.status == 409, r
    j = c.get(f"/v1/jobs/{new['job_id']}").json()
    assert j["state"] == "running" and j["attempt"] == new["attempt"], j
    # The new attempt, with the new epoch, completes; its bytes are the result.
    png = tiny_png(width=12, seed=9)
    r = complete(w, new, new_epoch, data=png)
    assert r.status == 200 and r.json()["duplicate"] is False, r
    assert c.get(f"/v1/jobs/{new['job_id']}").json()["state"] == "succeeded"
    assert c.get(f"/v1/jobs/{new['job_id']}/result").body == png
    # And the rest run too: nothing acknowledged was lost.
    for _ in jobs[1:]:
        e, a = poll_early(w)
        assert e == new_epoch
        res = outcome_batch(w, a, e, a["attempt"], tiny_png(seed=5))
        assert res["status"] == 200, res
    assert {c.get(f"/v1/jobs/{j}").json()["state"] for j in jobs} == {"succeeded"}


def test_wait_until_end_answers_once_with_the_outcome(head_factory):
    head = head_factory(HEAD_CONFIG)
    tenant = head.add_tenant("acme")
    c = head.client(tenant)
    w = FakeWorker(head, head.add_worker_token()).start()
    job = submit(c, JOB)
    epoch, a = poll_early(w)
    answers = []

    def waiter():
        # Its own connection: the long-poll holds it.
        answers.append(Client(head.url, tenant).get(f"/v1/jobs/{job['id']}?wait=30&until=end"))

    t = threading.Thread(target=waiter)
    t.start()
    # Many changes while it waits (each a round trip, so the long-poll is
    # surely in place for most of them); a plain wait would answer the first.
    for i in range(20):
        r = w.c.post(f"/v1/agent/jobs/{a['job_id']}/progress?epoch={epoch}", {
            "protocol": 1, "worker_id": w.id, "attempt": a["attempt"], "phase": "generating",
            "progress": (i + 1) / 40})
        assert r.status == 200, r
    assert complete(w, a, epoch).status == 200
    t.join(timeout=30)
    assert not t.is_alive()
    assert answers[0].status == 200, answers[0]
    assert answers[0].json()["state"] == "succeeded", answers[0].json()
    # A job that has ended answers at once; an unknown until is refused naming it.
    r = c.get(f"/v1/jobs/{job['id']}?wait=30&until=end")
    assert r.status == 200 and r.json()["state"] == "succeeded"
    r = c.get(f"/v1/jobs/{job['id']}?wait=1&until=change")
    assert r.status == 400 and r.json()["error"]["field"] == "until", r


def test_submit_with_wait_answers_once_the_job_has_ended(head_factory):
    """POST /v1/jobs?wait=S: one request that submits and answers with the
    job once it has ended (its result durable), or as it is when S runs out;
    a bad wait is refused naming it, with nothing stored."""
    head = head_factory(HEAD_CONFIG)
    tenant = head.add_tenant("acme")
    c = head.client(tenant)
    token = head.add_worker_token()
    w = FakeWorker(head, token).start()
    answers = []

    def submitter():
        answers.append(Client(head.url, tenant).post("/v1/jobs?wait=30", JOB))

    t = threading.Thread(target=submitter)
    t.start()
    epoch, a = poll_early(w)
    assert complete(w, a, epoch).status == 200
    t.join(timeout=30 * SLOW)
    assert not t.is_alive()
    r = answers[0]
    assert r.status == 201, r
    job = r.json()
    assert job["id"] == a["job_id"] and job["state"] == "succeeded", job
    assert job["result"]["url"] == f"/v1/jobs/{job['id']}/result", job
    assert r.header("Location") == f"/v1/jobs/{job['id']}"
    png = c.get(job["result"]["url"])
    assert png.status == 200
    # Its insert shared the result's commit: the answer means both are on
    # disk, so a kill -9 now keeps the job and its result.
    head.kill9()
    head.start()
    c = head.client(tenant)
    w = FakeWorker(head, token).start()
    assert c.get(f"/v1/jobs/{job['id']}").json()["state"] == "succeeded"
    assert c.get(job["result"]["url"]).body == png.body

    # Nobody polls: the wait runs out and the answer is the job as it is, stored.
    r = c.post("/v1/jobs?wait=1", JOB)
    assert r.status == 201 and r.json()["state"] == "queued", r
    assert c.get(f"/v1/jobs/{r.json()['id']}").json()["state"] == "queued"
    epoch, a = poll_early(w)
    assert a["job_id"] == r.json()["id"] and complete(w, a, epoch).status == 200

    # A replay of a key whose job ended answers it at once, 200 as without wait.
    keyed = {"Idempotency-Key": "k1"}
    r = c.post("/v1/jobs", JOB, headers=keyed)
    assert r.status == 201, r
    epoch, a = poll_early(w)
    assert complete(w, a, epoch).status == 200
    again = c.post("/v1/jobs?wait=20", JOB, headers=keyed)
    assert again.status == 200, again
    assert again.json()["id"] == r.json()["id"] and again.json()["state"] == "succeeded"

    before = len(c.get("/v1/jobs?limit=500").json()["jobs"])
    for bad in ("-1", "x", str(10 ** 6)):
        r = c.post(f"/v1/jobs?wait={bad}", JOB)
        assert r.status == 400 and r.json()["error"]["field"] == "wait", (bad, r)
    assert len(c.get("/v1/jobs?limit=500").json()["jobs"]) == before


def test_result_nobody_waits_for_is_durable_once_the_agent_is_answered(head_factory):
    """A job nobody watches (no long-poll, no stream, no ?wait): its result's
    commit may wait for the next one someone does wait on (or a few ms), but
    the agent's answer still comes only once it is durable — a kill -9 right
    after keeps the job succeeded with its bytes — and a client that starts
    waiting meanwhile gets the outcome."""
    head = head_factory(HEAD_CONFIG)
    tenant = head.add_tenant("acme")
    c = head.client(tenant)
    token = head.add_worker_token()
    w = FakeWorker(head, token).start()
    jid = c.post("/v1/jobs", JOB).json()["id"]
    epoch, a = poll_early(w)
    png = tiny_png(seed=7)
    assert complete(w, a, epoch, data=png).status == 200
    head.kill9()
    head.start()
    c = head.client(tenant)
    job = c.get(f"/v1/jobs/{jid}").json()
    assert job["state"] == "succeeded", job
    assert c.get(job["result"]["url"]).body == png

    # A client long-polling while the next job's result is pending hears the end.
    w = FakeWorker(head, token).start()
    jid = c.post("/v1/jobs", JOB).json()["id"]
    epoch, a = poll_early(w)
    answers = []
    t = threading.Thread(target=lambda: answers.append(
        Client(head.url, tenant).get(f"/v1/jobs/{jid}?wait=30&until=end")))
    t.start()
    assert complete(w, a, epoch).status == 200
    t.join(timeout=30 * SLOW)
    assert not t.is_alive() and answers[0].json()["state"] == "succeeded", answers


def test_early_assignment_is_traced_where_the_worker_got_it(head_factory):
    """The trace's assigned step is when the poll was answered, in its place
    before the job's started step, even when the assignment's commit comes
    later, carried by the job's own result."""
    head = head_factory(HEAD_CONFIG)
    c = head.client(head.add_tenant("acme"))
    w = FakeWorker(head, head.add_worker_token()).start()
    job = submit(c, JOB)
    epoch, a = poll_early(w)
    r = w.c.post(f"/v1/agent/jobs/{a['job_id']}/progress?epoch={epoch}", {
        "protocol": 1, "worker_id": w.id, "attempt": a["attempt"], "phase": "generating",
        "progress": 0.5})
    assert r.status == 200, r
    assert complete(w, a, epoch).status == 200
    t = c.get(f"/v1/jobs/{job['id']}/trace").json()
    assert without_admitted(t) == ["accepted", "queued", "placed", "assigned", "started",
                                   "finished"], t
    got = c.get(f"/v1/jobs/{job['id']}").json()
    assert step(t, "assigned")["at_ms"] == got["started_ms"], (t, got)
    assert step(t, "assigned")["worker"] == w.id and step(t, "assigned")["attempt"] == 1, t


def test_wait_until_end_still_times_out_with_the_job_as_it_is(head_factory):
    head = head_factory(HEAD_CONFIG)
    c = head.client(head.add_tenant("acme"))
    job = submit(c, JOB)  # no worker: it stays queued
    r = c.get(f"/v1/jobs/{job['id']}?wait=1&until=end")
    assert r.status == 200 and r.json()["state"] == "queued", r


def test_early_poll_with_max_fills_every_free_slot_in_one_answer(head_factory):
    head = head_factory(HEAD_CONFIG)
    c = head.client(head.add_tenant("acme"))
    w = FakeWorker(head, head.add_worker_token(), concurrency=2).start()
    jobs = [submit(c, JOB)["id"] for _ in range(3)]
    r = w.c.get(f"/v1/agent/assignments?worker_id={w.id}&wait=5&early=1&max=4")
    assert r.status == 200, r
    got = r.json()["assignments"]
    # Two slots: two jobs, oldest first, each its own attempt, both running here.
    assert [a["job_id"] for a in got] == jobs[:2], got
    for a in got:
        j = c.get(f"/v1/jobs/{a['job_id']}").json()
        assert j["state"] == "running" and j["worker_id"] == w.id, j
    epoch = r.json()["epoch"]
    for a in got:
        assert outcome_batch(w, a, epoch, a["attempt"], tiny_png())["status"] == 200
    # The slots are free again: the third comes (alone: nothing else waits).
    r = w.c.get(f"/v1/agent/assignments?worker_id={w.id}&wait=5&early=1&max=2")
    assert r.status == 200 and [a["job_id"] for a in r.json()["assignments"]] == jobs[2:], r
    bad = w.c.get(f"/v1/agent/assignments?worker_id={w.id}&wait=1&early=1&max=0")
    assert bad.status == 400 and bad.json()["error"]["field"] == "max", bad


def test_plain_poll_takes_one_whatever_max_says(head_factory):
    head = head_factory(HEAD_CONFIG)
    c = head.client(head.add_tenant("acme"))
    w = FakeWorker(head, head.add_worker_token(), concurrency=2).start()
    jobs = [submit(c, JOB)["id"] for _ in range(2)]
    r = w.c.get(f"/v1/agent/assignments?worker_id={w.id}&wait=5&max=2")
    assert r.status == 200 and [a["job_id"] for a in r.json()["assignments"]] == jobs[:1], r



def test_one_early_poll_asks_for_several_workers_and_names_each_ones_jobs(head_factory):
    head = head_factory(HEAD_CONFIG)
    c = head.client(head.add_tenant("acme"))
    tok = head.add_worker_token()
    # The poll's first worker cannot run the jobs; the two it names beside it can.
    lead = FakeWorker(head, tok, worker_id="box-gpu0", capabilities=("upscale",))
    assert lead.register()["poll_workers"] >= 3
    assert lead.heartbeat().status == 200
    w1 = FakeWorker(head, tok, worker_id="box-gpu1").start()
    w2 = FakeWorker(head, tok, worker_id="box-gpu2").start()
    jobs = sorted(submit(c, JOB)["id"] for _ in range(2))
    r = lead.c.get("/v1/agent/assignments?worker_id=box-gpu0&wait=5&early=1"
                   "&with=box-gpu1:1,box-gpu2:1")
    assert r.status == 200, r
    got = r.json()["assignments"]
    epoch = r.json()["epoch"]
    # One answer carries both, one for each worker it names.
    assert sorted(a["job_id"] for a in got) == jobs, got
    assert sorted(a["worker_id"] for a in got) == ["box-gpu1", "box-gpu2"], got
    by_id = {"box-gpu1": w1, "box-gpu2": w2}
    for a in got:
        j = c.get(f"/v1/jobs/{a['job_id']}").json()
        assert j["state"] == "running" and j["worker_id"] == a["worker_id"], j
        # Fenced by the worker it names: the poll's first worker cannot report it.
        assert complete(lead, a, epoch).status == 409
        assert complete(by_id[a["worker_id"]], a, epoch).status == 200
        assert c.get(f"/v1/jobs/{a['job_id']}").json()["state"] == "succeeded"
    # Nothing left: the poll waits its time out and answers 204.
    r = lead.c.get("/v1/agent/assignments?worker_id=box-gpu0&wait=1&early=1"
                   "&with=box-gpu1:1,box-gpu2:1")
    assert r.status == 204, r
    metrics = head.admin().get("/metrics").body.decode()
    assert re.search(r"^gpuq_agent_poll_workers_count 2$", metrics, re.M), metrics
    assert re.search(r"^gpuq_agent_poll_workers_sum 6$", metrics, re.M), metrics


def test_group_poll_refuses_a_malformed_or_unknown_with_and_assigns_nothing(head_factory):
    head = head_factory(HEAD_CONFIG)
    c = head.client(head.add_tenant("acme"))
    tok = head.add_worker_token()
    lead = FakeWorker(head, tok, worker_id="box-gpu0", capabilities=("upscale",)).start()
    FakeWorker(head, tok, worker_id="box-gpu1").start()
    job = submit(c, JOB)["id"]
    base = "/v1/agent/assignments?worker_id=box-gpu0&wait=1"
    for query, status in [
            ("&with=box-gpu1:1", 400),                  # only an early poll names others
            ("&early=1&with=box-gpu1", 400),            # no slot count
            ("&early=1&with=box-gpu1:0", 400),
            ("&early=1&with=box-gpu1:17", 400),
            ("&early=1&with=box-gpu1:x", 400),
            ("&early=1&with=box%20gpu1:1", 400),        # not a worker id
            ("&early=1&with=box-gpu1:1,", 400),         # an empty entry
            ("&early=1&with=box-gpu1:1,box-gpu1:1", 400),
            ("&early=1&with=" + ",".join(f"w{i}:1" for i in range(16)), 400),  # 17 in all
            ("&early=1&with=box-gpu9:1", 404)]:         # not registered
        r = lead.c.get(base + query)
        assert r.status == status, (query, r)
        assert r.json()["error"]["field"] == "with", (query, r.json())
    assert c.get(f"/v1/jobs/{job}").json()["state"] == "queued"
    metrics = head.admin().get("/metrics").body.decode()
    assert not re.search(r"^gpuq_agent_poll_workers_count [1-9]", metrics, re.M), metrics


def lock_store(head):
    """Holds the store's write lock: the head's commits wait behind it (its
    busy timeout is 5 s), so an assignment made now is not stored when the
    head dies."""
    db = sqlite3.connect(f"{head.data_dir}/gpuq.db", timeout=10, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    return db


class AnswerGate:
    """test_agent's TCP proxy with a gate: once armed, the answer to the
    first request starting with `hold` after the agent's next registration is
    held until release(). After a head restart the agent's heartbeat (whose
    answer carries the new head's cancel of the attempt the agent still lists
    from the dead head's time) and its poll (whose answer may carry the same
    attempt again, under the new epoch) race; holding one answer decides the
    order."""

    def __init__(self, target_url, hold):
        gate = self
        self.armed = self.registered = False
        self.held = set()
        self.open = threading.Event()
        self.open.set()

        class Gated(Proxy):
            def _forward(self, src, dst, data):
                if src.getpeername()[1] != self.target[1] and gate.armed:
                    if data.startswith(b"POST /v1/agent/register"):
                        gate.registered = True
                    elif (data.startswith(hold) and gate.registered
                          and not gate.held):
                        gate.open.clear()
                        gate.held.add(dst)
                elif src in gate.held:
                    gate.open.wait(60)
                dst.sendall(data)

        self.proxy = Gated(target_url)
        self.url = self.proxy.url

    def link(self, head):
        """What Agent needs of a head, with the agent's traffic through the
        gate."""
        link = type("ViaGate", (), {})()
        link.url, link.add_worker_token = self.url, head.add_worker_token
        return link

    def restart_unstored(self, head, db):
        """Arms the gate, kills gpuqd -9 while `db` (lock_store) holds the
        store's write lock, so the assignment was never stored, and starts it
        again on the same store and port."""
        self.armed = True
        port = head.url.rsplit(":", 1)[1]
        head.kill9()
        db.execute("ROLLBACK")
        db.close()
        head.start(listen=f"127.0.0.1:{port}")

    def release(self):
        self.armed = False
        self.open.set()


def test_agent_adopts_its_running_copy_when_a_restarted_head_hands_out_the_same_attempt(
        head_factory, tmp_path):
    """A real agent runs a long job assigned early; gpuqd dies (kill -9)
    before the assignment is stored, so the restarted head, on the same store
    and port, finds the job queued and hands out attempt 1 again, to the same
    worker, under its new epoch. The agent adopts the copy it is running
    (docs/protocol-worker.md, "Early assignments"): the job succeeds on that
    attempt, with no attempt ended lost or lease_expired on the way. Before,
    the agent dropped the new assignment as a duplicate, the old copy's report
    was refused (stale epoch), and the job ran again only once the head
    missed the attempt in the heartbeats (orphan grace, 10 s)."""
    head = head_factory(HEAD_CONFIG)
    c = head.client(head.add_tenant("acme"))
    job = submit(c, {"capability": "image.fast", "params": {"prompt": "long", "sim_ms": 4000}})
    gate = AnswerGate(head.url, b"POST /v1/agent/heartbeat")
    link = gate.link(head)
    # Two slots, so the agent polls while it runs the old copy. Its worker
    # token is stored here, before the store is locked.
    agent = Agent(link, tmp_path, "adopt", gpus=1, extra="concurrency = 2")
    db = lock_store(head)
    agent.start()
    try:
        running = wait_job(c, job["id"], 20, until=lambda j: j["state"] == "running"
                           and j.get("phase") == "generating")
        assert running["attempt"] == 1, running
        gate.restart_unstored(head, db)
        c = head.client(c.key)
        # The new head hands the attempt out again at the agent's poll, while
        # the answer to the heartbeat that listed the old copy is held.
        again = wait_job(c, job["id"], 20, until=lambda j: j["state"] == "running")
        assert again["attempt"] == 1 and again["worker_id"] == running["worker_id"], again
        rid = re.escape(f"{job['id']}.1")
        wait_until(lambda: re.search(f"assignment {rid} under epoch|duplicate assignment {rid}",
                                     agent.log()), 20, "the agent to take the assignment")
        gate.release()
        done = wait_job(c, job["id"], 30)
        assert done["state"] == "succeeded", done
        assert done["attempt"] == 1 and done["worker_id"] == running["worker_id"], done
        assert [(x["n"], x["outcome"]) for x in done["attempts"]] == [(1, "ok")], done
        assert "adopting the copy started under epoch" in agent.log()
        assert "duplicate assignment" not in agent.log()
    finally:
        gate.release()
        agent.stop()
        gate.proxy.close()


def test_agent_runs_the_same_attempt_again_when_its_copy_was_being_cancelled(
        head_factory, tmp_path):
    """As above, but the restarted head's cancel of the old copy reaches the
    agent first, and the runtime does not end that copy (it hangs): the new
    assignment of the same attempt waits, and runs once the agent has killed
    the hung runtime and restarted it. The job succeeds on attempt 1, with no
    attempt lost."""
    head = head_factory(HEAD_CONFIG)
    c = head.client(head.add_tenant("acme"))
    job = submit(c, {"capability": "image.fast", "params": {"prompt": "hung", "sim_ms": 300}})
    gate = AnswerGate(head.url, b"GET /v1/agent/assignments")
    link = gate.link(head)
    # The runtime hangs on this job (one-shot fault file) and is killed only
    # once it has missed pings for 8 s: long enough for the head's restart.
    agent = Agent(link, tmp_path, "succ", gpus=1,
                  extra=f"concurrency = 2\nping_timeout_ms = {int(8000 * SLOW)}")
    with open(agent.fault_file, "w") as f:
        f.write("hang\n")
    db = lock_store(head)
    agent.start()
    try:
        # The runtime took the job (and its fault) when the file is gone.
        wait_until(lambda: not os.path.exists(agent.fault_file), 20, "the runtime to take the job")
        running = c.get(f"/v1/jobs/{job['id']}").json()
        assert running["state"] == "running" and running["attempt"] == 1, running
        gate.restart_unstored(head, db)
        c = head.client(c.key)
        wait_until(lambda: f"cancelling job {job['id']} attempt 1" in agent.log(), 20,
                   "the new head's cancel of the old copy")
        gate.release()
        done = wait_job(c, job["id"], 30)
        assert done["state"] == "succeeded", done
        assert done["attempt"] == 1 and done["worker_id"] == running["worker_id"], done
        assert [(x["n"], x["outcome"]) for x in done["attempts"]] == [(1, "ok")], done
        assert "is being cancelled, the new one runs when it has left" in agent.log()
        assert "the cancelled copy has left; running the assignment" in agent.log()
    finally:
        gate.release()
        agent.stop()
        gate.proxy.close()


def test_job_whose_insert_fails_is_dropped_by_the_worker_that_has_it(tmp_path):
    """A new job goes to the scheduler while its insert commits (head.c,
    submit_early), so a worker may have it before the store refuses it (here:
    the data directory's disk is full). Then the client gets 503, the job is
    nowhere, the worker cannot report it and is told to drop it, and its slot
    is free for the next job. The commit and the dispatcher race: every try
    checks what must hold whichever won, until a try where the worker got the
    job first (bounded)."""
    fs = Tmpfs(tmp_path / "mnt", size_mb=16)
    why = fs.mount()
    if why:
        pytest.skip(f"cannot mount a tmpfs here: {why}")
    head = Head(os.path.join(fs.path, "data"), config_text=HEAD_CONFIG)
    head.log_path = str(tmp_path / "gpuqd.log")  # the log must not need the full disk
    try:
        head.start()
        c = head.client(head.add_tenant("acme"))
        w = FakeWorker(head, head.add_worker_token(), "gpu-a").start()
        worker_first = 0
        for tries in range(1, 31):
            # Heartbeats keep the fake worker registered (ttl 5 s) across tries.
            assert w.heartbeat().status == 200
            polled = {}
            poll = threading.Thread(target=lambda: polled.update(r=w.c.get(
                f"/v1/agent/assignments?worker_id={w.id}&wait=2&early=1")))
            poll.start()
            fs.fill()
            r = c.post("/v1/jobs", JOB)
            poll.join(10)
            assert not poll.is_alive()
            assert r.status == 503, r
            if polled["r"].status == 200:
                body = polled["r"].json()
                a = body["assignments"][0]
                worker_first += 1
                assert c.get(f"/v1/jobs/{a['job_id']}").status == 404
                res = complete(w, a, body["epoch"])
                assert res.status == 404 and res.json()["error"]["code"] == "not_found", res
                hb = w.heartbeat(running=[(a["job_id"], a["attempt"])])
                assert hb.status == 200, hb
                assert {"job_id": a["job_id"], "attempt": a["attempt"]} in hb.json()["cancel"], hb
            else:
                assert polled["r"].status == 204, polled["r"]
            fs.free()
            wait_until(lambda: Client(head.url).get("/readyz").status == 200, 20,
                       "/readyz 200 once space is free")
            assert w.heartbeat().status == 200
            # Nothing of the refused job holds the worker's one slot.
            job = submit(c, JOB)
            a = wait_until(lambda: w.poll(wait=2), 20, "the next job assigned")
            assert a["job_id"] == job["id"], (a, job)
            assert w.complete(a).status == 200
            if worker_first:
                break
        print(f"the worker had the refused job first on try {tries}")
        assert worker_first, "in 30 tries the store always refused the job before the worker had it"
        listed = c.get("/v1/jobs?limit=100").json()
        assert all(j["state"] == "succeeded" for j in listed["jobs"]), listed
    finally:
        head.stop()
        fs.umount()
