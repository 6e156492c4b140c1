"""Result retention: results are deleted once [jobs] result_retention_h (here
result_retention_s, its short form) has passed since they were stored, and a
client asking for one then gets 410 Gone with a message that says why; the job
itself stays readable; the uploads a finished job named are let go with it.
A real gpuqd, and a worker speaking the protocol from Python. Every wait is
bounded and ends on an observed answer."""

import os
import sqlite3
import subprocess

from gpuq_harness import SLOW, FakeWorker, binary, tiny_png, wait_until
from test_inputs import upload as upload_input

RETENTION_S = 3
CONFIG = f"""
[jobs]
result_retention_s = {RETENTION_S}
input_unused_s = 1
"""


def run_job(head, c, worker, params=None):
    r = c.post("/v1/jobs", {"capability": "image.fast",
                            "params": params or {"prompt": "a fox", "width": 256,
                                                 "height": 256}})
    assert r.status == 201, r
    job = r.json()["id"]
    a = wait_until(lambda: worker.poll(wait=1), 20 * SLOW, "the job to be assigned")
    assert a["job_id"] == job
    assert worker.complete(a, data=tiny_png(seed=int(job) % 200)).status in (200, 204)
    wait_until(lambda: c.get(f"/v1/jobs/{job}").json()["state"] == "succeeded", 20 * SLOW,
               "the job to succeed")
    return job


def result_rows(head):
    con = sqlite3.connect(os.path.join(head.data_dir, "gpuq.db"))
    try:
        return {r[0] for r in con.execute("SELECT job_id FROM results WHERE job_id <> 0")}
    finally:
        con.close()


def test_a_result_past_retention_is_deleted_and_answers_410(head_factory):
    head = head_factory(config_text=CONFIG)
    c = head.client(head.add_tenant("acme"))
    worker = FakeWorker(head, head.add_worker_token()).start()
    old = run_job(head, c, worker)
    r = c.get(f"/v1/jobs/{old}/result")
    assert r.status == 200 and r.body == tiny_png(seed=int(old) % 200)

    gone = wait_until(lambda: (lambda x: x if x.status != 200 else None)(
        c.get(f"/v1/jobs/{old}/result")), 30 * SLOW, "the result to be deleted")
    assert gone.status == 410, gone
    err = gone.json()["error"]
    assert err["code"] == "gone" and "result_retention_h" in err["message"], err
    assert int(old) not in result_rows(head)           # deleted from the store
    j = c.get(f"/v1/jobs/{old}")                         # the job itself stays
    assert j.status == 200 and j.json()["state"] == "succeeded"

    # A result stored now is kept: the sweep takes only the old ones.
    new = run_job(head, c, worker)
    assert c.get(f"/v1/jobs/{new}/result").status == 200
    assert int(new) in result_rows(head)


def test_an_input_of_a_job_past_retention_goes_with_it(head_factory):
    head = head_factory(config_text=CONFIG)
    c = head.client(head.add_tenant("acme"))
    worker = FakeWorker(head, head.add_worker_token()).start()
    upload = upload_input(c, tiny_png(seed=9))["id"]
    job = run_job(head, c, worker, {"prompt": "x", "width": 256, "height": 256,
                                    "inputs": {"image": upload}})
    assert c.get(f"/v1/inputs/{upload}").status == 200  # named by a job: kept
    wait_until(lambda: c.get(f"/v1/jobs/{job}/result").status == 410, 30 * SLOW,
               "the result to be deleted")
    wait_until(lambda: c.get(f"/v1/inputs/{upload}").status == 404, 30 * SLOW,
               "the upload of a job past retention to be deleted")


def test_a_bad_retention_is_refused_naming_the_field(tmp_path):
    conf = tmp_path / "gpuqd.conf"
    conf.write_text("[jobs]\nresult_retention_s = -5\n")
    p = subprocess.run([binary("gpuqd"), "--listen", "127.0.0.1:0", "--data",
                        str(tmp_path / "data"), "--config", str(conf)],
                       capture_output=True, text=True, timeout=60 * SLOW)
    assert p.returncode != 0
    assert "result_retention_s" in p.stdout + p.stderr


def jobs_in_memory(head, state):
    text = head.client(None).get("/metrics").body.decode()
    for line in text.splitlines():
        if line.startswith(f'gpuq_jobs{{state="{state}"}} '):
            return int(float(line.split()[-1]))
    return 0


def test_finished_jobs_leave_memory_and_stay_readable(head_factory):
    """A head that runs for months must not hold every job it ever ran:
    finished jobs leave memory after [jobs] keep_finished_s, those with an
    idempotency key too; the store answers for them, and a replay of an
    idempotency key still finds its job there (a different body: 409)."""
    head = head_factory(config_text="[jobs]\nkeep_finished_s = 10\n")
    c = head.client(head.add_tenant("acme"))
    body = {"capability": "image.fast", "params": {"prompt": "a fox"}}
    plain = [c.post("/v1/jobs", body).json()["id"] for _ in range(3)]
    keyed = c.post("/v1/jobs", {**body, "idempotency_key": "k-1"}).json()["id"]
    for j in plain + [keyed]:
        assert c.delete(f"/v1/jobs/{j}").status == 200
    assert jobs_in_memory(head, "cancelled") == 4
    wait_until(lambda: jobs_in_memory(head, "cancelled") == 0, 60 * SLOW,
               "the four jobs to leave memory")
    for j in plain + [keyed]:
        r = c.get(f"/v1/jobs/{j}")
        assert r.status == 200 and r.json()["state"] == "cancelled", r
    # Another tenant still cannot see them, nor reach them by the key.
    other = head.client(head.add_tenant("globex"))
    assert other.get(f"/v1/jobs/{plain[0]}").status == 404
    r = other.post("/v1/jobs", {**body, "idempotency_key": "k-1"})
    assert r.status == 201 and r.json()["id"] != keyed, r
    r = c.post("/v1/jobs", {**body, "idempotency_key": "k-1"})
    assert r.status == 200 and r.json()["id"] == keyed and r.json()["state"] == "cancelled", r
    r = c.post("/v1/jobs", {"capability": "image.fast", "params": {"prompt": "a cat"},
                            "idempotency_key": "k-1"})
    assert r.status == 409, r
    assert jobs_in_memory(head, "cancelled") == 0  # a replay does not bring it back


def test_finished_jobs_beyond_keep_finished_max_leave_memory_oldest_first(head_factory):
    """A flood of short jobs must not fill the head's memory for
    keep_finished_s: past [jobs] keep_finished_max finished jobs, the oldest
    leave memory, down to four fifths of the max, without waiting for the
    minute's sweep; all stay readable from the store."""
    head = head_factory(config_text="[jobs]\nkeep_finished_max = 100\n")
    c = head.client(head.add_tenant("acme"))
    body = {"capability": "image.fast", "params": {"prompt": "a fox"}}
    ids = []
    for _ in range(250):
        r = c.post("/v1/jobs", body)
        assert r.status == 201, r
        ids.append(r.json()["id"])
        assert c.delete(f"/v1/jobs/{ids[-1]}").status == 200
    wait_until(lambda: jobs_in_memory(head, "cancelled") <= 100, 30 * SLOW,
               "the finished jobs in memory to come down to keep_finished_max")
    assert jobs_in_memory(head, "cancelled") >= 60  # the newest stay, not all go
    for j in ids:
        r = c.get(f"/v1/jobs/{j}")
        assert r.status == 200 and r.json()["state"] == "cancelled", r


def test_a_key_of_a_job_older_than_a_restart_loads_replays_it(head_factory):
    """A restart loads the finished jobs within keep_finished_s (an hour at
    most) into memory; a retried submit whose key names an older job gets
    that job back from the store (R5), with or without ?wait, not a second
    job nor an error — nor a 429 when its lane is full, since a replay adds
    nothing to it."""
    head = head_factory(config_text="[admission]\nbatch_max_wait_s = 3\n")
    c = head.client(head.add_tenant("acme"))
    body = {"capability": "image.fast", "lane": "batch", "params": {"prompt": "a fox"}}
    r = c.post("/v1/jobs", {**body, "idempotency_key": "order-17"})
    assert r.status == 201, r
    first = r.json()["id"]
    assert c.delete(f"/v1/jobs/{first}").status == 200
    assert head.stop() == 0
    # Two hours ago, as far as the store knows.
    db = sqlite3.connect(os.path.join(head.data_dir, "gpuq.db"))
    with db:
        db.execute("UPDATE jobs SET created_ms = created_ms - 7200000,"
                   " finished_ms = finished_ms - 7200000 WHERE id = ?", (int(first),))
    db.close()
    head.start()
    # Both boots say so: the first on an empty store, the second because the
    # job finished before the window.
    assert head.tail(200000).count(
        "recovered 0 queued and 0 running (re-queued) jobs; 0 recent finished") == 2
    c = head.client(c.key)
    for path in ("/v1/jobs", "/v1/jobs?wait=5"):
        r = c.post(path, {**body, "idempotency_key": "order-17"})
        assert r.status == 200 and r.json()["id"] == first, r
        assert r.json()["state"] == "cancelled", r
    r = c.post("/v1/jobs", {**body, "params": {"prompt": "a cat"}, "idempotency_key": "order-17"})
    assert r.status == 409, r
    assert [j["id"] for j in c.get("/v1/jobs").json()["jobs"]] == [first]
    # The batch lane fills (no worker: nothing drains it) until a new job
    # is told to wait; the replay is still answered with its job.
    queued = []
    for _ in range(200):
        r = c.post("/v1/jobs", body)
        if r.status == 429:
            break
        assert r.status == 201, r
        queued.append(r.json()["id"])
    assert r.status == 429, "the batch lane never filled"
    r = c.post("/v1/jobs", {**body, "idempotency_key": "order-17"})
    assert r.status == 200 and r.json()["id"] == first, r
    assert len(c.get("/v1/jobs?limit=500").json()["jobs"]) == len(queued) + 1
