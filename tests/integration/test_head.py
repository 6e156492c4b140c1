"""gpuqd end to end: the client API, auth and tenant isolation, idempotency,
bad input, the worker protocol with attempt fencing, and durability across
kill -9. Real gpuqd on 127.0.0.1:0 in a temp dir."""

import http.client
import json
import os
import signal
import socket
import threading
import time

from gpuq_harness import Client, FakeWorker, Head, SLOW, tiny_png, wait_until

JOB = {"capability": "image.fast", "params": {"prompt": "a fox", "width": 512, "height": 512}}


def submit(c, body=None, **kw):
    r = c.post("/v1/jobs", body if body is not None else JOB, **kw)
    return r


def test_submit_get_list_cancel(head):
    c = head.client(head.add_tenant("acme"))
    r = submit(c)
    assert r.status == 201, r
    job = r.json()
    assert job["state"] == "queued"
    assert job["capability"] == "image.fast"
    assert job["model"] == "image-v2"  # the capability's default model
    assert job["params"]["width"] == 512 and job["params"]["steps"] == 30  # normalized
    assert job["cost_s"] > 0
    # No worker yet: no invented ETA, and the reason it waits.
    assert job["eta"] is None and job["waiting_reason"]
    assert job["attempts"] == [] and job["timeout_s"] is None
    assert r.header("Location") == f"/v1/jobs/{job['id']}"

    g = c.get(f"/v1/jobs/{job['id']}")
    assert g.status == 200 and g.json()["id"] == job["id"]

    second = submit(c).json()
    lst = c.get("/v1/jobs?limit=1")
    assert lst.status == 200
    body = lst.json()
    assert [j["id"] for j in body["jobs"]] == [second["id"]]  # newest first
    page2 = c.get(f"/v1/jobs?limit=1&after={body['next']}").json()
    assert [j["id"] for j in page2["jobs"]] == [job["id"]]

    d = c.delete(f"/v1/jobs/{job['id']}")
    assert d.status == 200 and d.json()["state"] == "cancelled"
    assert c.delete(f"/v1/jobs/{job['id']}").status == 409
    assert [j["id"] for j in c.get("/v1/jobs?state=cancelled").json()["jobs"]] == [job["id"]]


def test_long_poll_returns_on_change(head):
    c = head.client(head.add_tenant("acme"))
    job = submit(c).json()
    # Unchanged: returns the same job after the wait.
    t0 = time.monotonic()
    r = c.get(f"/v1/jobs/{job['id']}?wait=1")
    assert r.status == 200 and r.json()["state"] == "queued"
    assert time.monotonic() - t0 >= 0.9
    # A change (cancel from another connection) ends the wait early.
    result = {}

    def waiter():
        result["r"] = head.client(c.key).get(f"/v1/jobs/{job['id']}?wait=30")

    t = threading.Thread(target=waiter)
    t.start()
    wait_until(lambda: True, 1, "thread start")
    c.delete(f"/v1/jobs/{job['id']}")
    t.join(timeout=20 * SLOW)
    assert not t.is_alive()
    assert result["r"].json()["state"] == "cancelled"


def test_tenant_isolation(head):
    a = head.client(head.add_tenant("a"))
    b = head.client(head.add_tenant("b"))
    job = submit(a).json()
    for path in (f"/v1/jobs/{job['id']}", f"/v1/jobs/{job['id']}/result",
                 f"/v1/jobs/{job['id']}/events"):
        r = b.get(path)
        assert r.status == 404, (path, r)
    assert b.delete(f"/v1/jobs/{job['id']}").status == 404
    assert b.get("/v1/jobs").json()["jobs"] == []
    assert a.get(f"/v1/jobs/{job['id']}").status == 200
    # Admin-only routes are closed to tenants.
    assert b.post("/v1/tenants", {"name": "x"}).status == 403
    assert b.post("/v1/worker-tokens", {}).status == 403


def test_auth_required(head):
    anon = head.client(None)
    assert anon.get("/healthz").status == 200
    assert anon.get("/readyz").status == 200
    r = anon.post("/v1/jobs", JOB)
    assert r.status == 401 and r.json()["error"]["field"] == "Authorization"
    assert head.client("gq_notakey000000000000000000000000").get("/v1/jobs").status == 401
    # A worker token is not a tenant key, and a tenant key is not a worker token.
    wt = head.add_worker_token()
    assert head.client(wt).post("/v1/jobs", JOB).status == 403
    key = head.add_tenant("t")
    assert head.client(key).post("/v1/agent/register", {"protocol": 1}).status == 403


def test_keys_are_stored_hashed_and_never_logged(head):
    key = head.add_tenant("secretive")
    token = head.add_worker_token()
    head.client(key).post("/v1/jobs", JOB)
    with open(os.path.join(head.data_dir, "gpuq.db"), "rb") as f:
        db = f.read()
    for path in ("gpuq.db-wal",):
        p = os.path.join(head.data_dir, path)
        if os.path.exists(p):
            with open(p, "rb") as f:
                db += f.read()
    assert key.encode() not in db and token.encode() not in db
    log = head.tail(10**7)
    assert key not in log and token not in log
    st = os.stat(os.path.join(head.data_dir, "admin.key"))
    assert st.st_mode & 0o777 == 0o600


def test_idempotency(head):
    c = head.client(head.add_tenant("acme"))
    body = dict(JOB, idempotency_key="order-17")
    first = submit(c, body)
    assert first.status == 201
    again = submit(c, body)
    assert again.status == 200 and again.json()["id"] == first.json()["id"]
    # Same key through the header.
    hdr = c.post("/v1/jobs", JOB, headers={"Idempotency-Key": "order-17"})
    assert hdr.status == 200 and hdr.json()["id"] == first.json()["id"]
    other = dict(body, params={"prompt": "a wolf"})
    conflict = submit(c, other)
    assert conflict.status == 409 and conflict.json()["error"]["field"] == "idempotency_key"
    # Keys are per tenant.
    d = head.client(head.add_tenant("other"))
    assert submit(d, body).status == 201
    assert len(c.get("/v1/jobs").json()["jobs"]) == 1


def test_idempotency_concurrent_retries_make_one_job(head):
    key = head.add_tenant("acme")
    body = dict(JOB, idempotency_key="dup")
    ids, statuses = [], []
    lock = threading.Lock()

    def go():
        r = Client(head.url, key).post("/v1/jobs", body)
        with lock:
            statuses.append(r.status)
            ids.append(r.json()["id"])

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30 * SLOW)
    assert len(set(ids)) == 1 and len(ids) == 8
    assert sorted(statuses) == [200] * 7 + [201]


BAD_BODIES = [
    (b'{"capability":', "invalid_json", "body"),
    (b'[1,2]', "invalid_json", "body"),
    (b'{"model":"image-v2"}', "missing_field", "capability"),
    (b'{"capability":7}', "invalid_field", "capability"),
    (b'{"capability":"image.nope"}', "invalid_field", "capability"),
    (b'{"capability":"image.fast","model":"nope"}', "invalid_field", "model"),
    (b'{"capability":"image.fast","color":"red"}', "unknown_field", "color"),
    (b'{"capability":"image.fast","params":{"width":100000,"height":100000}}', "invalid_field",
     "params.width"),
    (b'{"capability":"image.fast","params":{"width":"big"}}', "invalid_field", "params.width"),
    (b'{"capability":"image.fast","params":{"width":1001}}', "invalid_field", "params.width"),
    (b'{"capability":"image.fast","params":{"steps":0}}', "invalid_field", "params.steps"),
    (b'{"capability":"image.fast","params":{"steps":1.5}}', "invalid_field", "params.steps"),
    (b'{"capability":"image.fast","params":{"frames":-1}}', "invalid_field", "params.frames"),
    (b'{"capability":"image.fast","params":{"lora":"x"}}', "unknown_field", "params.lora"),
    (b'{"capability":"image.fast","params":[]}', "invalid_field", "params"),
    (b'{"capability":"image.fast","params":{"prompt":"' + b"x" * 5000 + b'"}}', "invalid_field",
     "params.prompt"),
    (b'{"capability":"image.fast","lane":"fast"}', "invalid_field", "lane"),
    (b'{"capability":"image.fast","priority":"gold"}', "invalid_field", "priority"),
    (b'{"capability":"image.fast","deadline":1000}', "invalid_field", "deadline"),
    (b'{"capability":"image.fast","idempotency_key":""}', "invalid_field", "idempotency_key"),
    (b'{"capability":"image.fast","capability":"video"}', "invalid_json", "body"),
    (b'\xff\xfe', "invalid_json", "body"),
]


def test_bad_input_named_and_nothing_created(head):
    c = head.client(head.add_tenant("acme"))
    for body, code, field in BAD_BODIES:
        r = c.request("POST", "/v1/jobs", body=body, raw=True,
                      headers={"Content-Type": "application/json"})
        assert r.status == 400, (body[:60], r)
        err = r.json()["error"]
        assert err["code"] == code, (body[:60], err)
        assert err["field"] == field, (body[:60], err)
        assert err["message"]
    assert c.get("/v1/jobs").json()["jobs"] == []
    # Bad ids and query values.
    for path, field in (("/v1/jobs/abc", "id"), ("/v1/jobs/-1", "id"), ("/v1/jobs/0", "id"),
                        ("/v1/jobs/99999999999999999999999", "id"),
                        ("/v1/jobs?limit=0", "limit"), ("/v1/jobs?state=done", "state"),
                        ("/v1/jobs/1?wait=-3", "wait")):
        r = c.get(path)
        assert r.status == 400 and r.json()["error"]["field"] == field, (path, r)
    assert c.get("/v1/jobs/424242").status == 404
    assert c.request("PUT", "/v1/jobs").status == 405


def test_oversize_body_and_headers(head):
    c = head.client(head.add_tenant("acme"))
    big = b'{"capability":"image.fast","params":{"prompt":"' + b"x" * 70000 + b'"}}'
    r = c.request("POST", "/v1/jobs", body=big, raw=True)
    assert r.status == 413 and r.json()["error"]["code"] == "too_large"
    c.close()
    # Headers past the connection's memory limit are refused, not buffered forever.
    s = socket.create_connection((c.host, c.port), timeout=10 * SLOW)
    s.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n")
    resp = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            resp += chunk
            if b"\r\n\r\n" in resp:
                break
    except (ConnectionResetError, BrokenPipeError):
        pass
    s.close()
    assert resp == b"" or resp.split(b" ")[1][:1] == b"4", resp[:100]
    assert c.get("/v1/jobs").json()["jobs"] == []


def test_idle_client_does_not_hold_others(head):
    c = head.client(head.add_tenant("acme"))
    # A client that opens connections and sends half a request, then goes quiet.
    idle = [socket.create_connection((c.host, c.port), timeout=5) for _ in range(20)]
    for s in idle:
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    t0 = time.monotonic()
    for _ in range(20):
        assert submit(c).status == 201
    assert time.monotonic() - t0 < 10 * SLOW
    for s in idle:
        s.close()


def test_events_stream_until_terminal(head):
    key = head.add_tenant("acme")
    c = head.client(key)
    job = submit(c).json()
    conn = http.client.HTTPConnection(c.host, c.port, timeout=20 * SLOW)
    conn.request("GET", f"/v1/jobs/{job['id']}/events", headers={"Authorization": f"Bearer {key}"})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"

    def next_event():
        data = None
        while True:
            line = r.fp.readline().decode()
            assert line, "stream ended early"
            line = line.rstrip("\n")
            if line.startswith("data: "):
                data = json.loads(line[6:])
            elif line == "" and data is not None:
                return data

    assert next_event()["state"] == "queued"
    c.delete(f"/v1/jobs/{job['id']}")
    assert next_event()["state"] == "cancelled"
    conn.close()


def test_fake_worker_end_to_end(head):
    key = head.add_tenant("acme")
    c = head.client(key)
    w = FakeWorker(head, head.add_worker_token()).start()
    job = submit(c).json()
    a = w.poll()
    assert a is not None and a["job_id"] == job["id"] and a["attempt"] == 1
    assert a["params"]["prompt"] == "a fox" and a["model"] == "image-v2"
    running = c.get(f"/v1/jobs/{job['id']}").json()
    assert running["state"] == "running" and running["phase"] == "assigned"
    assert running["worker_id"] == w.id
    assert w.progress(a, "generating", 0.5).status == 200
    got = c.get(f"/v1/jobs/{job['id']}").json()
    assert got["phase"] == "generating" and got["progress"] == 0.5
    png = tiny_png(seed=3)
    r = w.complete(a, png)
    assert r.status == 200, r
    done = c.get(f"/v1/jobs/{job['id']}").json()
    assert done["state"] == "succeeded"
    assert done["result"] == {"content_type": "image/png", "bytes": len(png),
                              "url": f"/v1/jobs/{job['id']}/result"}
    res = c.get(done["result"]["url"])
    assert res.status == 200 and res.header("Content-Type") == "image/png" and res.body == png
    # A retried completion of the same attempt is not accepted twice.
    again = w.complete(a, png)
    assert again.status == 200 and again.json()["duplicate"] is True
    workers = c.get("/v1/workers").json()["workers"]
    assert [x["id"] for x in workers] == [w.id]
    assert workers[0]["loaded_models"][0]["name"] == "image-v2"


def test_held_job_is_taken_back_when_its_gpu_fails(head_factory):
    """A worker that can hold a job ahead ("ahead": 1) is handed its next
    job while its slot is taken (here at once: assign_ahead_s is large).
    That job has not started: when the GPU reports failed health it leaves
    the GPU like a job only placed there (R20). Its attempt ends requeued
    (no failure counted), the worker is told to drop it, and it runs on
    another GPU; the running job is left to finish."""
    head = head_factory(config_text="[scheduler]\nassign_ahead_s = 3600\n")
    c = head.client(head.add_tenant("acme"))
    token = head.add_worker_token()
    w = FakeWorker(head, token, "gpu-a", ahead=1).start()
    first, second = (submit(c).json()["id"] for _ in range(2))
    a1 = w.poll()
    a2 = w.poll()
    assert (a1["job_id"], a2["job_id"]) == (first, second), (a1, a2)
    assert [x["ahead"] for x in c.get("/v1/workers").json()["workers"]] == [1]
    running = [(first, 1), (second, 1)]

    def told_to_drop():
        r = w.heartbeat(running=running, health="failed")
        assert r.status == 200, r
        return {"job_id": second, "attempt": 1} in r.json().get("cancel", [])

    wait_until(told_to_drop, 10, "the held job on the failed GPU's cancel list")
    held = c.get(f"/v1/jobs/{second}").json()
    assert held["state"] == "queued", held
    assert [x["outcome"] for x in held["attempts"]] == ["requeued"], held["attempts"]
    w2 = FakeWorker(head, token, "gpu-b").start()
    b = w2.poll()
    assert (b["job_id"], b["attempt"]) == (second, 2), b
    assert w2.complete(b).status == 200
    assert w.complete(a1).status == 200
    for jid, attempt in ((first, 1), (second, 2)):
        j = c.get(f"/v1/jobs/{jid}").json()
        assert j["state"] == "succeeded" and j["attempt"] == attempt, j


def test_stale_attempt_refused(head):
    key = head.add_tenant("acme")
    c = head.client(key)
    token = head.add_worker_token()
    w1 = FakeWorker(head, token, "gpu-a").start()
    job = submit(c).json()
    a = w1.poll()
    assert a["attempt"] == 1
    w2 = FakeWorker(head, token, "gpu-b").start()
    # The first attempt fails (OOM): the job is retried, on another GPU.
    r = w1.fail(a, "oom")
    assert r.status == 200 and r.json()["retried"] is True
    b = w2.poll()
    assert b["job_id"] == job["id"] and b["attempt"] == 2
    # Late messages for attempt 1 are refused.
    assert w1.complete(a).status == 409
    assert w1.complete(a).json()["error"]["code"] == "stale_attempt"
    assert w1.progress(a).status == 409
    assert w2.complete(b, attempt=1).status == 409
    assert w2.complete(b).status == 200
    assert c.get(f"/v1/jobs/{job['id']}").json()["attempt"] == 2


def poll_any(workers, rounds=10):
    """The first assignment any of the workers gets (the scheduler picks the GPU)."""
    for _ in range(rounds):
        for w in workers:
            a = w.poll(wait=1)
            if a:
                return w, a
    raise AssertionError("no worker got an assignment")


def test_retry_budget_then_dead_then_resubmit(head_factory):
    h = head_factory(config_text="[jobs]\nmax_attempts = 2\n")
    c = h.client(h.add_tenant("acme"))
    token = h.add_worker_token()
    workers = [FakeWorker(h, token, "gpu-a").start(), FakeWorker(h, token, "gpu-b").start()]
    job = submit(c).json()
    first, a = poll_any(workers)
    assert first.fail(a, "cuda").json()["retried"] is True
    second, b = poll_any(workers)
    assert second is not first  # retried on a different GPU
    assert b["attempt"] == 2
    assert second.fail(b, "cuda").json()["retried"] is False
    final = c.get(f"/v1/jobs/{job['id']}").json()
    # The budget is spent: dead-lettered, with its whole history.
    assert final["state"] == "dead" and final["error"]["class"] == "cuda"
    assert [(x["n"], x["worker"], x["outcome"], x["error_class"]) for x in final["attempts"]] == [
        (1, first.id, "error", "cuda"), (2, second.id, "error", "cuda")]
    assert all(x["ended_ms"] >= x["started_ms"] > 0 for x in final["attempts"])
    dead = c.get("/v1/jobs?state=dead").json()["jobs"]
    assert [x["id"] for x in dead] == [job["id"]]
    assert len(dead[0]["attempts"]) == 2
    # Only the admin re-submits; it runs again with a fresh budget and a new attempt number.
    assert c.post(f"/v1/jobs/{job['id']}/resubmit").status == 403
    r = h.admin().post(f"/v1/jobs/{job['id']}/resubmit")
    assert r.status == 200 and r.json()["state"] == "queued", r
    again, x = poll_any(workers)
    assert x["job_id"] == job["id"] and x["attempt"] == 3
    assert again.complete(x).status == 200
    done = c.get(f"/v1/jobs/{job['id']}").json()
    assert done["state"] == "succeeded" and len(done["attempts"]) == 3
    assert h.admin().post(f"/v1/jobs/{job['id']}/resubmit").status == 409
    # bad_input is never retried.
    job2 = submit(c).json()
    owner, x = poll_any(workers)
    assert x["job_id"] == job2["id"]
    assert owner.fail(x, "bad_input").json()["retried"] is False
    assert c.get(f"/v1/jobs/{job2['id']}").json()["state"] == "failed"


def test_silent_worker_jobs_requeued(head_factory):
    h = head_factory(config_text="[workers]\nheartbeat_ms = 100\nttl_ms = 500\n")
    c = h.client(h.add_tenant("acme"))
    token = h.add_worker_token()
    w1 = FakeWorker(h, token, "gpu-a").start()
    job = submit(c).json()
    a = w1.poll()
    assert a["job_id"] == job["id"]
    # gpu-a goes silent; after its TTL the job is queued again and a new GPU gets it.
    wait_until(lambda: c.get(f"/v1/jobs/{job['id']}").json()["state"] == "queued", 10,
               "the job to be re-queued after the TTL")
    assert c.get("/v1/workers").json()["workers"] == []
    w2 = FakeWorker(h, token, "gpu-b").start()
    b = w2.poll()
    assert b["job_id"] == job["id"] and b["attempt"] == 2
    assert w1.complete(a).status in (404, 409)
    assert w2.complete(b).status == 200


def test_cancel_running_job_tells_its_worker(head):
    c = head.client(head.add_tenant("acme"))
    w = FakeWorker(head, head.add_worker_token()).start()
    job = submit(c).json()
    a = w.poll()
    assert c.delete(f"/v1/jobs/{job['id']}").status == 200
    hb = w.heartbeat(running=[(job["id"], a["attempt"])]).json()
    assert hb["cancel"] == [{"job_id": job["id"], "attempt": a["attempt"]}]
    assert w.complete(a).status == 409


def test_drain_flag_reaches_agent(head):
    w = FakeWorker(head, head.add_worker_token()).start()
    assert w.heartbeat().json()["drain"] is False
    assert head.admin().post(f"/v1/workers/{w.id}/drain").status == 200
    assert w.heartbeat().json()["drain"] is True
    assert head.admin().post("/v1/workers/nope/drain").status == 404


def test_restart_keeps_jobs_and_keys(head):
    key = head.add_tenant("acme")
    c = head.client(key)
    ids = [submit(c).json()["id"] for _ in range(5)]
    assert head.stop() == 0
    head.start()
    c = head.client(key)
    assert sorted(j["id"] for j in c.get("/v1/jobs").json()["jobs"]) == sorted(ids)
    new = submit(c).json()["id"]
    assert int(new) > max(int(i) for i in ids)


# One automatic checkpoint's worth of WAL (STORE_WAL_PREALLOC_BYTES, src/store/store.h).
WAL_BYTES = 4000 * (4096 + 24) + 32


def test_wal_is_written_ahead_and_kept_across_restarts(head_factory):
    """The store's WAL is on disk at its working size from the first start, so
    commits overwrite blocks the file already has (a cheaper fsync); it stays
    through a clean stop and a kill -9, with every acknowledged job; and
    [store] wal_preallocate = false leaves SQLite's own way (the WAL grows and
    goes at a clean stop)."""
    h = head_factory()
    wal = os.path.join(h.data_dir, "gpuq.db-wal")
    assert os.path.getsize(wal) >= WAL_BYTES
    inode = os.stat(wal).st_ino
    key = h.add_tenant("acme")
    ids = [submit(h.client(key)).json()["id"] for _ in range(20)]
    assert h.stop() == 0
    assert os.path.getsize(wal) >= WAL_BYTES and os.stat(wal).st_ino == inode
    h.start()
    ids += [submit(h.client(key)).json()["id"] for _ in range(20)]
    h.kill9()
    h.start()
    jobs = h.client(key).get("/v1/jobs?limit=500").json()["jobs"]
    assert sorted(j["id"] for j in jobs) == sorted(ids)
    assert os.stat(wal).st_ino == inode

    plain = head_factory(config_text="[store]\nwal_preallocate = false\n", name="plain")
    plain_wal = os.path.join(plain.data_dir, "gpuq.db-wal")
    assert os.path.getsize(plain_wal) < WAL_BYTES
    submit(plain.client(plain.add_tenant("acme")))
    assert plain.stop() == 0
    assert not os.path.exists(plain_wal)


def thread_io(pid, name):
    """The syscw (write calls) of pid's threads named name, summed."""
    n = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() != name:
                    continue
            with open(f"/proc/{pid}/task/{tid}/io") as f:
                n += int(dict(line.split(": ") for line in f.read().splitlines())["syscw"])
        except (FileNotFoundError, ProcessLookupError):  # a thread that has ended
            continue
    return n


def test_wal_is_checkpointed_in_the_background_and_stays_bounded_under_load(head_factory):
    """Big commits (batches of long jobs, with single submits beside them) go
    through the WAL several times over: the checkpointer thread copies pages
    into the database file while the committer keeps writing, the WAL starts
    again from its head instead of growing, and a kill -9 right after loses
    no acknowledged job. (No GPU: admission's interactive bound is lifted so
    the single submits beside the backlog are taken.)"""
    head = head_factory(config_text="[admission]\ninteractive_max_wait_s = 0\n")
    wal = os.path.join(head.data_dir, "gpuq.db-wal")
    key = head.add_tenant("acme", tier="paid")
    long_job = dict(JOB, params=dict(JOB["params"], prompt="a fox " * 500))
    acked, errors = [], []
    lock = threading.Lock()

    def batches(n):
        cl = Client(head.url, key, timeout=60)
        for _ in range(n):
            r = cl.post("/v1/batches", {"jobs": [long_job] * 1500})
            if r.status != 201:
                errors.append(r)
                return
            with lock:
                acked.extend(j["id"] for j in r.json()["jobs"])

    def singles(n):
        cl = Client(head.url, key, timeout=60)
        for _ in range(n):
            r = cl.post("/v1/jobs", long_job)
            if r.status != 201:
                errors.append(r)
                return
            with lock:
                acked.append(r.json()["id"])

    before = thread_io(head.proc.pid, "checkpointer")
    threads = [threading.Thread(target=batches, args=(4,)) for _ in range(2)]
    threads += [threading.Thread(target=singles, args=(150,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[:3]
    assert len(acked) == 2 * 4 * 1500 + 4 * 150
    assert thread_io(head.proc.pid, "checkpointer") > before, "no checkpoint in the background"
    # 12,600 jobs of 3 KiB are about 2.5 WALs' worth: it went round, not on.
    assert os.path.getsize(wal) <= 3 * WAL_BYTES, os.path.getsize(wal)
    head.kill9()
    head.start()
    c = head.client(key)
    stored = set()
    after = ""
    for _ in range(100):
        page = c.get(f"/v1/jobs?limit=500{after}").json()
        stored.update(j["id"] for j in page["jobs"])
        if not page["next"]:
            break
        after = f"&after={page['next']}"
    assert not set(acked) - stored, f"{len(set(acked) - stored)} acknowledged jobs lost"


def test_kill9_during_burst_loses_no_acknowledged_job(head):
    key = head.add_tenant("acme")
    acked = []
    lock = threading.Lock()
    stop = threading.Event()

    def burst(n):
        cl = Client(head.url, key, timeout=10)
        i = 0
        while not stop.is_set() and i < 2000:
            body = dict(JOB, idempotency_key=f"t{n}-{i}")
            try:
                r = cl.post("/v1/jobs", body)
            except OSError:
                return
            if r.status == 201:
                with lock:
                    acked.append((r.json()["id"], body["idempotency_key"]))
            i += 1

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    wait_until(lambda: len(acked) >= 300, 60, "300 acknowledged submits")
    head.kill9()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    n_acked = len(acked)
    head.start()
    c = head.client(key)
    stored = {}
    after = ""
    for _ in range(100):
        page = c.get(f"/v1/jobs?limit=500{after}").json()
        for j in page["jobs"]:
            stored[j["id"]] = j["idempotency_key"]
        if not page["next"]:
            break
        after = f"&after={page['next']}"
    missing = [(i, k) for i, k in acked if stored.get(i) != k]
    assert not missing, f"{len(missing)} of {n_acked} acknowledged jobs lost"
    assert len(stored) >= n_acked


# ---- the job's life: leases, reconciliation, incarnations, retries, breakers ----

LIFE = ("[lifecycle]\nlease_ms = 600\norphan_grace_ms = 300\n"
        "[workers]\nheartbeat_ms = 100\nttl_ms = 30000\n")


class IncarnatedWorker(FakeWorker):
    """A FakeWorker that announces an incarnation (the agent's boot id)."""

    def __init__(self, *a, incarnation="boot-1", **kw):
        super().__init__(*a, **kw)
        self.incarnation = incarnation

    def register(self):
        r = self.c.post("/v1/agent/register", {
            "protocol": 1, "worker_id": self.id, "host": "testhost",
            "incarnation": self.incarnation,
            "gpu": {"index": 0, "name": "Fake GPU", "uuid": "GPU-" + self.id,
                    "vram_total_mb": self.vram_mb},
            "capabilities": self.caps, "concurrency": self.concurrency,
            "models": self.models})
        assert r.status == 200, r
        return r.json()


def job_of(c, job_id):
    return c.get(f"/v1/jobs/{job_id}").json()


def worker_view(c, worker_id):
    return next(w for w in c.get("/v1/workers").json()["workers"] if w["id"] == worker_id)


def test_lease_expiry_requeues_and_stale_completion_is_refused(head_factory):
    h = head_factory(config_text=LIFE)
    c = h.client(h.add_tenant("acme"))
    token = h.add_worker_token()
    w1 = FakeWorker(h, token, "gpu-a").start()
    job = submit(c).json()
    a = w1.poll()
    assert a["job_id"] == job["id"]
    w2 = FakeWorker(h, token, "gpu-b").start()
    # gpu-a neither heartbeats nor reports progress: its lease runs out.
    got = wait_until(lambda: (lambda j: j if j["state"] == "queued" else None)(job_of(c, job["id"])),
                     10, "the lease to expire")
    assert got["attempts"][0]["outcome"] == "lease_expired"
    assert got["attempts"][0]["worker"] == "gpu-a"
    b = w2.poll()
    assert b["job_id"] == job["id"] and b["attempt"] == 2
    # gpu-a wakes up and delivers: refused, its attempt is not current.
    r = w1.complete(a)
    assert r.status == 409 and r.json()["error"]["code"] == "stale_attempt"
    # Progress and heartbeats from gpu-b keep its lease alive past the lease time.
    t_end = time.monotonic() + 1.5
    while time.monotonic() < t_end:
        assert w2.heartbeat(running=[(job["id"], 2)]).status == 200
        assert job_of(c, job["id"])["state"] == "running"
        time.sleep(0.1)
    assert w2.complete(b).status == 200
    done = job_of(c, job["id"])
    assert done["state"] == "succeeded" and done["eta"] is None
    assert [x["outcome"] for x in done["attempts"]] == ["lease_expired", "ok"]


def test_reconciliation_requeues_a_job_the_worker_does_not_report(head_factory):
    h = head_factory(config_text=LIFE.replace("lease_ms = 600", "lease_ms = 60000"))
    c = h.client(h.add_tenant("acme"))
    token = h.add_worker_token()
    w1 = FakeWorker(h, token, "gpu-a").start()
    job = submit(c).json()
    a = w1.poll()
    w2 = FakeWorker(h, token, "gpu-b").start()
    # gpu-a is alive but no longer runs it (its report omits the job).
    def requeued():
        assert w1.heartbeat(running=[]).status == 200
        j = job_of(c, job["id"])
        return j if j["state"] != "running" else None
    got = wait_until(requeued, 10, "the omitted job to be re-queued")
    assert got["attempts"][0]["outcome"] == "lost"
    b = w2.poll()
    assert b["job_id"] == job["id"] and b["attempt"] == 2
    assert w1.complete(a).status == 409
    assert w2.complete(b).status == 200


def test_new_incarnation_requeues_what_the_old_one_ran(head_factory):
    h = head_factory(config_text=LIFE.replace("lease_ms = 600", "lease_ms = 60000"))
    c = h.client(h.add_tenant("acme"))
    token = h.add_worker_token()
    w = IncarnatedWorker(h, token, "gpu-a", concurrency=1).start()
    job = submit(c).json()
    a = w.poll()
    assert worker_view(c, "gpu-a")["inflight"] == 1
    # The agent restarts (kill -9, same worker id, new boot id) and registers again.
    w.incarnation = "boot-2"
    w.register()
    got = job_of(c, job["id"])
    assert got["state"] == "queued" and got["attempts"][0]["outcome"] == "lost"
    wait_until(lambda: worker_view(c, "gpu-a")["inflight"] == 0, 5, "inflight back to 0")
    assert w.heartbeat().status == 200
    b = w.poll()
    assert b["job_id"] == job["id"] and b["attempt"] == 2
    assert w.complete(a).status == 409
    assert w.complete(b).status == 200
    # The same incarnation registering again (a network retry) re-queues nothing.
    job2 = submit(c).json()
    x = w.poll()
    w.register()
    assert job_of(c, job2["id"])["state"] == "running"
    assert w.complete(x).status == 200


def test_retry_never_runs_on_a_worker_that_failed_it(head_factory):
    h = head_factory(config_text="[lifecycle]\nmax_attempts = 3\n")
    c = h.client(h.add_tenant("acme"))
    token = h.add_worker_token()
    workers = [FakeWorker(h, token, f"gpu-{n}").start() for n in "abc"]
    job = submit(c).json()
    seen = []
    for attempt in (1, 2):
        w, a = poll_any(workers)
        assert a["job_id"] == job["id"] and a["attempt"] == attempt
        assert w.id not in seen
        seen.append(w.id)
        assert w.fail(a, "cuda").json()["retried"] is True
    w, a = poll_any(workers)
    assert a["attempt"] == 3 and w.id not in seen
    assert w.complete(a).status == 200
    assert [x["worker"] for x in job_of(c, job["id"])["attempts"]] == seen + [w.id]


def test_failing_worker_is_quarantined_then_probed_and_recovers(head_factory):
    h = head_factory(config_text="[lifecycle]\nmax_attempts = 5\n"
                     "[breaker]\nfailures = 2\nwindow_ms = 60000\ncooldown_ms = 800\n"
                     "max_cooldown_ms = 800\n")
    c = h.client(h.add_tenant("acme"))
    w = FakeWorker(h, h.add_worker_token(), "gpu-bad").start()
    job = submit(c).json()
    for attempt in (1, 2):
        a = w.poll()
        assert a["attempt"] == attempt
        assert w.fail(a, "cuda").status == 200
    view = wait_until(lambda: (lambda v: v if v["state"] == "quarantined" else None)(
        worker_view(c, "gpu-bad")), 5, "the worker to be quarantined")
    assert view["breaker"]["state"] == "open" and view["breaker"]["reason"]
    assert '"event":"quarantine"' in h.tail(20000)
    # Quarantined: the job waits, visibly, with no ETA.
    queued = job_of(c, job["id"])
    assert queued["state"] == "queued" and queued["eta"] is None and queued["waiting_reason"]
    # After the cool-down, one probe: it succeeds and the worker recovers.
    a = w.poll(wait=10)
    assert a is not None and a["job_id"] == job["id"] and a["attempt"] == 3
    assert '"event":"probe"' in h.tail(20000)
    assert w.complete(a).status == 200
    view = wait_until(lambda: (lambda v: v if v["breaker"]["state"] == "closed" else None)(
        worker_view(c, "gpu-bad")), 5, "the breaker to close")
    assert view["state"] == "ready"
    assert '"event":"recovered"' in h.tail(20000)


def test_cancel_of_a_running_job_frees_its_worker(head):
    c = head.client(head.add_tenant("acme"))
    w = FakeWorker(head, head.add_worker_token(), concurrency=1).start()
    job = submit(c).json()
    a = w.poll()
    assert worker_view(c, w.id)["inflight"] == 1
    r = c.delete(f"/v1/jobs/{job['id']}")
    assert r.status == 200 and r.json()["state"] == "cancelled"
    assert r.json()["attempts"][0]["outcome"] == "cancelled"
    wait_until(lambda: worker_view(c, w.id)["inflight"] == 0, 5, "inflight back to 0")
    job2 = submit(c).json()
    b = w.poll()
    assert b is not None and b["job_id"] == job2["id"]
    assert w.complete(b).status == 200
    assert w.complete(a).status == 409


def test_unservable_model_is_refused_naming_the_field(head_factory):
    h = head_factory()
    c = h.client(h.add_tenant("acme"))
    # No worker ever registered: accepted, waiting visibly.
    early = c.post("/v1/jobs", {"capability": "image.fast", "model": "video"})
    assert early.status == 201 and early.json()["waiting_reason"]
    FakeWorker(h, h.add_worker_token()).start()  # image.fast with image-v2
    r = c.post("/v1/jobs", {"capability": "image.fast", "model": "video"})
    assert r.status == 400, r
    err = r.json()["error"]
    assert err["field"] == "model" and "no worker serves model video for image.fast" in err["message"]
    assert submit(c).status == 201
    # The catalog survives a restart.
    h.stop()
    h.start()
    c = h.client(c.key)
    assert c.post("/v1/jobs", {"capability": "image.fast", "model": "video"}).status == 400


def test_allow_unserved_accepts_and_shows_why_it_waits(head_factory):
    h = head_factory(config_text="[jobs]\nallow_unserved = true\n")
    c = h.client(h.add_tenant("acme"))
    FakeWorker(h, h.add_worker_token()).start()
    r = c.post("/v1/jobs", {"capability": "image.fast", "model": "video"})
    assert r.status == 201
    j = r.json()
    assert j["eta"] is None
    assert j["waiting_reason"] == "no worker serves model video for image.fast"
    # It blocks nothing: a servable job behind it runs.
    ok = submit(c).json()
    assert job_of(c, ok["id"])["eta"] is not None


def test_deadline_expires_a_queued_job(head):
    c = head.client(head.add_tenant("acme"))
    deadline = int(time.time() * 1000) + 400
    job = submit(c, dict(JOB, deadline=deadline)).json()
    assert job["state"] == "queued" and job["deadline"] == deadline
    got = wait_until(lambda: (lambda j: j if j["state"] == "expired" else None)(
        job_of(c, job["id"])), 10, "the job to expire")
    assert got["error"]["class"] == "deadline" and got["eta"] is None
    # The listing reads the store, which has the change once its commit is done.
    wait_until(lambda: [x["id"] for x in c.get("/v1/jobs?state=expired").json()["jobs"]]
               == [job["id"]], 5, "the expired job in the listing")


def test_timeout_aborts_the_run_on_its_worker(head_factory):
    h = head_factory(config_text="[lifecycle]\nmax_attempts = 1\n")
    c = h.client(h.add_tenant("acme"))
    w = FakeWorker(h, h.add_worker_token()).start()
    job = submit(c, dict(JOB, timeout_s=1)).json()
    assert job["timeout_s"] == 1
    a = w.poll()
    assert a["timeout_ms"] == 1000

    def told_to_stop():
        hb = w.heartbeat(running=[(job["id"], a["attempt"])]).json()
        return {"job_id": job["id"], "attempt": a["attempt"]} in hb["cancel"]
    wait_until(told_to_stop, 10, "the worker to be told to abort the attempt")
    got = job_of(c, job["id"])
    assert got["state"] == "dead" and got["attempts"][0]["outcome"] == "timeout"
    assert w.complete(a).status == 409


def test_job_behind_a_drained_gpu_shows_why_and_no_eta(head):
    c = head.client(head.add_tenant("acme"))
    w = FakeWorker(head, head.add_worker_token()).start()
    assert head.admin().post(f"/v1/workers/{w.id}/drain").status == 200
    wait_until(lambda: worker_view(c, w.id)["state"] == "draining", 5, "drain")
    job = submit(c).json()
    assert job["eta"] is None and "image.fast" in job["waiting_reason"]
    again = job_of(c, job["id"])
    assert again["eta"] is None and again["waiting_reason"]


def test_restart_requeues_running_jobs_and_keeps_their_history(head_factory):
    h = head_factory(config_text="[lifecycle]\nmax_attempts = 2\n")
    key = h.add_tenant("acme")
    c = h.client(key)
    token = h.add_worker_token()
    w = FakeWorker(h, token, "gpu-a").start()
    failed = submit(c).json()
    a = w.poll()
    assert w.fail(a, "oom").json()["retried"] is True
    b = w.poll()
    assert b["job_id"] == failed["id"] and b["attempt"] == 2
    assert h.stop() == 0
    h.start()
    c = h.client(key)
    got = job_of(c, failed["id"])
    # Running at the restart: taken back without blame, history kept from the store.
    assert got["state"] == "queued" and got["failures"] == 1
    assert [x["outcome"] for x in got["attempts"]] == ["error", "requeued"]
    w = FakeWorker(h, token, "gpu-a").start()
    assert w.complete(b).status == 409
    x = w.poll()
    assert x["job_id"] == failed["id"] and x["attempt"] == 3
    assert w.complete(x).status == 200
    assert [y["outcome"] for y in job_of(c, failed["id"])["attempts"]] == ["error", "requeued", "ok"]


def test_restart_with_a_long_history_brings_back_live_and_recent_jobs(head_factory):
    """With live jobs a small part of the store (here 2 of 10), a restart
    reads them by index, not by a scan of every job ever stored
    (bench/restart, BENCH_RESTART_HISTORY): the running job comes back
    re-queued, the queued one queued, both in id order for the next poll,
    and the recent finished ones are in memory again."""
    h = head_factory()
    key = h.add_tenant("acme")
    c = h.client(key)
    token = h.add_worker_token()
    w = FakeWorker(h, token, "gpu-a").start()
    done = []
    for _ in range(8):
        j = submit(c).json()
        a = w.poll()
        assert a["job_id"] == j["id"] and w.complete(a).status == 200
        done.append(j["id"])
    running = submit(c).json()["id"]
    a = w.poll()
    assert a["job_id"] == running
    queued = submit(c).json()["id"]
    assert h.stop() == 0
    h.start()
    assert ("recovered 1 queued and 1 running (re-queued) jobs; 8 recent finished"
            in h.tail()), h.tail()
    c = h.client(key)
    assert job_of(c, running)["state"] == "queued"
    assert all(job_of(c, j)["state"] == "succeeded" for j in done)
    w = FakeWorker(h, token, "gpu-a").start()
    first = w.poll()
    assert first["job_id"] == running, first
    assert w.complete(first).status == 200
    second = w.poll()
    assert second["job_id"] == queued, second


def test_retry_leaves_the_failed_gpu_when_another_registers(head_factory):
    """A job fails on gpu-a while gpu-a is the only GPU of its capability, so
    its retry is placed back on gpu-a; gpu-b registers before gpu-a takes it.
    The retry must run on gpu-b (gpu-a stays idle), not again where it
    failed."""
    h = head_factory(config_text="[lifecycle]\nmax_attempts = 3\n")
    c = h.client(h.add_tenant("acme"))
    token = h.add_worker_token()
    wa = FakeWorker(h, token, "gpu-a").start()
    job = submit(c).json()
    a = wa.poll()
    assert a["job_id"] == job["id"] and a["attempt"] == 1
    assert wa.fail(a, "cuda").json()["retried"] is True
    # Its runtime restarted after the CUDA error (R27) and is back: until
    # this report gpu-a would take nothing new.
    assert wa.heartbeat().status == 200
    # The retry is placed on gpu-a, the only GPU there is (observed in the
    # placement log, before gpu-b exists).
    placement = f'"event":"placement","job":"{job["id"]}","worker":"gpu-a"'
    wait_until(lambda: h.tail(200000).count(placement) >= 2, 10,
               "the retry to be placed back on gpu-a")
    assert job_of(c, job["id"])["state"] == "queued"
    wb = FakeWorker(h, token, "gpu-b").start()
    # gpu-a asks for work first: it does not get the job it failed.
    assert wa.poll(wait=1) is None
    b = wb.poll(wait=5)
    assert b is not None and b["job_id"] == job["id"] and b["attempt"] == 2
    moved = f'"event":"placement","job":"{job["id"]}","worker":"gpu-b","reason":"retry moved off gpu-a'
    assert moved in h.tail(200000)
    assert wb.complete(b).status == 200
    done = job_of(c, job["id"])
    assert done["state"] == "succeeded"
    assert [(x["worker"], x["outcome"]) for x in done["attempts"]] == [
        ("gpu-a", "error"), ("gpu-b", "ok")]


def polls_heard(h):
    """How many assignment polls the head has taken in (its /metrics)."""
    text = h.admin().get("/metrics").body.decode()
    return sum(int(line.split()[-1]) for line in text.splitlines()
               if line.startswith("gpuq_agent_poll_workers_count"))


def test_a_poll_out_before_its_runtime_died_gets_no_retry(head_factory):
    """gpu-a holds ahead, so a poll of it is out while its job runs. The job
    crashes with its runtime, and gpu-a is the only GPU: the poll that was
    sent before the crash must not be handed the retry (the runtime is
    restarting; the retry would spend another attempt there). The agent's
    next report says the runtime is back: a heartbeat, or a poll sent after
    the crash, which an agent sends only for a ready worker. Then gpu-a takes
    the retry, the only GPU there is."""
    h = head_factory(config_text="[lifecycle]\nmax_attempts = 5\n")
    c = h.client(h.add_tenant("acme"))
    token = h.add_worker_token()
    wa = FakeWorker(h, token, "gpu-a", ahead=1).start()
    held = FakeWorker(h, token, "gpu-a", ahead=1)  # its own connection, for the poll left out
    job = submit(c).json()
    a = wa.poll()
    assert a["job_id"] == job["id"] and a["attempt"] == 1
    assert wa.heartbeat(running=[(job["id"], 1)]).status == 200
    for cls, report in (("crash", "heartbeat"), ("hang", "poll")):
        heard = polls_heard(h)
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("a", held.poll(wait=2)))
        t.start()
        wait_until(lambda: polls_heard(h) > heard, 10, "the head to hold gpu-a's poll")
        assert wa.fail(a, cls).json()["retried"] is True
        t.join()
        assert out["a"] is None, (cls, out)  # the poll from before the crash got nothing
        assert job_of(c, job["id"])["state"] == "queued"
        if report == "heartbeat":
            assert wa.heartbeat().status == 200
        b = wa.poll(wait=5)
        assert b is not None and b["job_id"] == job["id"] and b["attempt"] == a["attempt"] + 1, b
        a = b
    assert wa.complete(a).status == 200
    done = job_of(c, job["id"])
    assert done["state"] == "succeeded"
    assert [(x["worker"], x["outcome"], x["error_class"]) for x in done["attempts"]] == [
        ("gpu-a", "error", "crash"), ("gpu-a", "error", "hang"), ("gpu-a", "ok", None)]


def test_a_stopped_head_blames_no_worker_for_its_own_silence(head_factory):
    """The head itself stands still (SIGSTOP: a paused VM, swapping) for longer
    than the lease and the TTL while a worker runs a job: once it runs again the
    worker is still registered and its attempt still current, so the result is
    accepted and nothing runs twice."""
    h = head_factory(config_text="[lifecycle]\nlease_ms = 600\n"
                     "[workers]\nheartbeat_ms = 100\nttl_ms = 1000\n")
    c = h.client(h.add_tenant("acme"))
    w = FakeWorker(h, h.add_worker_token(), "gpu-a").start()
    job = submit(c).json()
    a = w.poll()
    assert a["job_id"] == job["id"]
    assert w.heartbeat(running=[(job["id"], 1)]).status == 200
    os.kill(h.proc.pid, signal.SIGSTOP)
    try:
        # The fault is a length of time: the head stays stopped past TTL + lease.
        until = time.monotonic() + 2.5
        wait_until(lambda: time.monotonic() >= until, 5, "the head's stall to last 2.5 s")
    finally:
        os.kill(h.proc.pid, signal.SIGCONT)
    assert w.heartbeat(running=[(job["id"], 1)]).status == 200
    assert w.complete(a).status == 200
    done = job_of(c, job["id"])
    assert done["state"] == "succeeded" and done["attempt"] == 1, done
    assert [x["outcome"] for x in done["attempts"]] == ["ok"]
    # The dispatcher logs the stall on its first pass after SIGCONT, which may
    # come after the requests above were answered.
    wait_until(lambda: "the head stood still for" in h.tail(20000), 5, "the stall's log line")
