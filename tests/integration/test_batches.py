"""Batches, backlog and capacity against a real gpuqd (127.0.0.1:0, temp dir)
with a fake worker speaking the agent protocol: a batch of 1,000 jobs is
submitted in one request, listed, its progress and ETA read while a worker
completes some, cancelled (every unfinished job ends cancelled, none lost) and
found whole after a restart; a batch with invalid jobs names each by index and
queues nothing; the CLI drives it end to end; backlog and capacity answer in
GPU-seconds, scoped by tenant."""

import json
import os
import subprocess

from gpuq_harness import SLOW, FakeWorker, binary, wait_until

CLI_TIMEOUT_S = 60 * SLOW
TERMINAL = {"succeeded", "failed", "cancelled", "dead", "expired"}


def job(i, **kw):
    j = {"capability": "image.fast", "params": {"prompt": f"cat {i}"}, "lane": "batch"}
    j.update(kw)
    return j


def gpuq(head, *args, key=None, stdin=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("GPUQ_")}
    e["GPUQ_URL"] = head.url
    e["HOME"] = head.data_dir
    if key is not None:
        e["GPUQ_KEY"] = key
    return subprocess.run([binary("gpuq"), *args], env=e, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, input=stdin)


def test_batch_of_1000_submitted_listed_progressed_cancelled_and_kept(head_factory):
    h = head_factory()
    key = h.add_tenant("acme")
    c = h.client(key)
    worker = FakeWorker(h, h.add_worker_token()).start()

    r = c.post("/v1/batches", {"jobs": [job(i) for i in range(1000)]})
    assert r.status == 201, r
    b = r.json()
    bid = b["id"]
    assert r.header("Location") == f"/v1/batches/{bid}"
    assert b["total"] == 1000 and len(b["jobs"]) == 1000
    ids = [j["id"] for j in b["jobs"]]
    assert len(set(ids)) == 1000
    assert b["counts"]["queued"] + b["counts"]["running"] == 1000
    # Each job is an ordinary job of the tenant, durable before the 201.
    first = c.get(f"/v1/jobs/{ids[0]}").json()
    assert first["lane"] == "batch" and first["params"]["prompt"] == "cat 0"

    # The worker runs three jobs to the end: progress shows them.
    for _ in range(3):
        a = worker.poll(wait=10)
        assert a is not None
        worker.heartbeat(running=[(a["job_id"], a["attempt"])])
        assert worker.complete(a).status == 200
    b = c.get(f"/v1/batches/{bid}").json()
    assert b["counts"]["succeeded"] == 3
    assert b["unfinished"] == 997 and b["done"] is False
    assert b["backlog_gpu_s"] > 0
    # ETA of the last job: a time, or the reason there is none.
    assert (b["eta"] and b["eta"]["finish_ms"] > b["created_ms"]) or b["eta_reason"]

    listed = c.get("/v1/batches").json()["batches"]
    assert [x["id"] for x in listed] == [bid] and listed[0]["counts"]["succeeded"] == 3
    # Another tenant sees neither the batch nor its list entry.
    other = h.client(h.add_tenant("zeta"))
    assert other.get(f"/v1/batches/{bid}").status == 404
    assert other.get("/v1/batches").json()["batches"] == []
    assert other.delete(f"/v1/batches/{bid}").status == 404

    r = c.delete(f"/v1/batches/{bid}")
    assert r.status == 200, r
    b = r.json()
    assert b["unfinished"] == 0 and b["done"] is True
    assert b["counts"]["succeeded"] == 3 and b["counts"]["cancelled"] == 997
    states = {j["id"]: j["state"] for j in b["jobs"]}
    assert all(s in TERMINAL for s in states.values())
    # Every job read on its own agrees (a sample across the batch).
    for jid in ids[::50]:
        assert c.get(f"/v1/jobs/{jid}").json()["state"] == states[jid]

    # After a restart the batch is whole: same ids, same states.
    h.stop()
    h.start()
    c = h.client(key)
    b2 = c.get(f"/v1/batches/{bid}").json()
    assert [j["id"] for j in b2["jobs"]] == ids
    assert b2["counts"] == b["counts"]
    # A new batch gets a new id.
    r = c.post("/v1/batches", {"jobs": [job(0)]})
    assert r.status == 201 and int(r.json()["id"]) > int(bid)


def test_batch_with_invalid_jobs_names_each_by_index_and_queues_nothing(head):
    c = head.client(head.add_tenant("acme"))
    jobs = [job(0), job(1, capability="nope"), job(2), job(3, colour="red"),
            job(4, lane="slow")]
    r = c.post("/v1/batches", {"jobs": jobs})
    assert r.status == 400, r
    body = r.json()
    assert body["error"]["code"] == "invalid_batch"
    errs = {e["index"]: e for e in body["errors"]}
    assert sorted(errs) == [1, 3, 4]
    assert errs[1]["field"] == "capability" and "nope" in errs[1]["message"]
    assert "colour" in errs[3]["message"]
    assert errs[4]["field"] == "lane"
    assert c.get("/v1/jobs").json()["jobs"] == []
    assert c.get("/v1/batches").json()["batches"] == []
    # The body itself: wrong shapes are named.
    assert c.post("/v1/batches", {"jobs": []}).json()["error"]["field"] == "jobs"
    assert c.post("/v1/batches", {"jobs": {}}).json()["error"]["field"] == "jobs"
    assert c.post("/v1/batches", {"job": [job(0)]}).status == 400
    # Only a tenant submits; a worker token cannot read batches.
    assert head.admin().post("/v1/batches", {"jobs": [job(0)]}).status == 403
    w = head.client(head.add_worker_token())
    assert w.get("/v1/batches").status == 403


def test_batch_limits_are_settings(head_factory):
    h = head_factory(config_text="[jobs]\nmax_batch_jobs = 5\nmax_batch_body_bytes = 4096\n")
    c = h.client(h.add_tenant("acme"))
    r = c.post("/v1/batches", {"jobs": [job(i) for i in range(6)]})
    assert r.status == 400 and r.json()["error"]["field"] == "jobs"
    assert "5" in r.json()["error"]["message"]
    assert c.post("/v1/batches", {"jobs": [job(i) for i in range(5)]}).status == 201
    big = [job(i, params={"prompt": "x" * 1000}) for i in range(5)]
    assert c.post("/v1/batches", {"jobs": big}).status == 413


def test_batch_cli_submit_get_cancel_and_refusal_by_line(head, tmp_path):
    key = head.add_tenant("acme")
    path = tmp_path / "jobs.jsonl"
    lines = ["# three jobs", *(json.dumps(job(i)) for i in range(2)), "",
             json.dumps(job(2))]
    path.write_text("\n".join(lines) + "\n")
    p = gpuq(head, "batch", "submit", str(path), key=key)
    assert p.returncode == 0, p.stderr
    bid = p.stdout.strip()
    assert bid.isdigit() and "3 jobs queued" in p.stderr

    p = gpuq(head, "batch", "get", bid, key=key)
    assert p.returncode == 0 and f"batch {bid}: 3 jobs: 3 queued" in p.stdout, p.stdout
    got = json.loads(gpuq(head, "batch", "get", bid, "--json", key=key).stdout)
    assert got["total"] == 3 and len(got["jobs"]) == 3
    p = gpuq(head, "batch", "ls", key=key)
    assert p.returncode == 0 and f"batch {bid}:" in p.stdout

    p = gpuq(head, "batch", "cancel", bid, key=key)
    assert p.returncode == 0 and "3 cancelled" in p.stdout, p.stdout
    p = gpuq(head, "batch", "get", "999", key=key)
    assert p.returncode == 1 and "not_found" in p.stderr

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(job(0)) + "\n\n" + json.dumps(job(1, capability="nope")) + "\n")
    p = gpuq(head, "batch", "submit", str(bad), key=key)
    assert p.returncode == 1
    assert f"{bad}:3 (job 1)" in p.stderr and "nope" in p.stderr, p.stderr
    notjson = tmp_path / "nj.jsonl"
    notjson.write_text(json.dumps(job(0)) + "\n{oops\n")
    p = gpuq(head, "batch", "submit", str(notjson), key=key)
    assert p.returncode == 2 and f"{notjson}:2" in p.stderr


def test_batch_cli_wait_follows_until_done(head, tmp_path):
    key = head.add_tenant("acme")
    worker = FakeWorker(head, head.add_worker_token()).start()
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(json.dumps(job(i)) for i in range(3)) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUQ_")}
    env.update(GPUQ_URL=head.url, GPUQ_KEY=key, HOME=head.data_dir)
    proc = subprocess.Popen([binary("gpuq"), "batch", "submit", str(path), "--wait",
                             "--timeout", "60"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(3):
            a = worker.poll(wait=int(10 * SLOW))
            assert a is not None
            assert worker.complete(a).status == 200
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "3 jobs: 3 succeeded" in out
    assert "\r" not in err and "3 succeeded" in err  # plain lines, not a bar, off a terminal


def test_backlog_per_capability_lane_tenant_scoped(head):
    a = head.client(head.add_tenant("acme"))
    z = head.client(head.add_tenant("zeta"))
    assert a.post("/v1/batches", {"jobs": [job(i) for i in range(4)]}).status == 201
    assert a.post("/v1/jobs", {"capability": "video"}).status == 201
    assert z.post("/v1/jobs", {"capability": "image.fast"}).status == 201

    mine = a.get("/v1/backlog").json()
    assert mine["queued"] == 5 and mine["running"] == 0
    caps = {e["name"]: e for e in mine["capabilities"]}
    assert caps["image.fast"]["queued"] == 4 and caps["video"]["queued"] == 1
    assert caps["video"]["gpu_s"] > caps["image.fast"]["gpu_s"] / 4
    lanes = {e["name"]: e for e in mine["lanes"]}
    assert lanes["batch"]["queued"] == 4 and lanes["interactive"]["queued"] == 1
    assert [e["name"] for e in mine["tenants"]] == ["acme"]
    total = sum(e["gpu_s"] for e in mine["capabilities"])
    assert abs(total - mine["gpu_s"]) < 0.01

    every = head.admin().get("/v1/backlog").json()
    assert every["queued"] == 6
    assert sorted(e["name"] for e in every["tenants"]) == ["acme", "zeta"]

    p = gpuq(head, "backlog", key=head.admin_key)
    assert p.returncode == 0, p.stderr
    assert "GPU-SECONDS" in p.stdout and "zeta" in p.stdout and "video" in p.stdout


def test_capacity_from_max_gpus_weights_and_admin_only(head_factory):
    h = head_factory(config_text="[capacity]\nmax_gpus = 6\n")
    a = h.client(h.add_tenant("acme"))
    h.add_tenant("zeta")
    cap = h.admin().get("/v1/capacity").json()
    assert cap["max_gpus"] == 6 and cap["max_gpus_from"] == "setting"
    assert cap["speed_measured"] is False
    assert abs(cap["fleet_gpu_s_per_min"] - 360) < 1e-6
    per = {t["name"]: t["gpu_s_per_min"] for t in cap["tenants"]}
    assert abs(per["acme"] - per["zeta"]) < 1e-6
    assert abs(sum(per.values()) - cap["batch_gpu_s_per_min"]) < 1e-6
    assert a.get("/v1/capacity").status == 403

    p = gpuq(h, "capacity", key=h.admin_key)
    assert p.returncode == 0, p.stderr
    assert "6 GPUs (setting)" in p.stdout and "acme" in p.stdout


def test_capacity_defaults_to_registered_gpus(head):
    FakeWorker(head, head.add_worker_token(), worker_id="g0").start()
    FakeWorker(head, head.add_worker_token(), worker_id="g1").start()
    cap = head.admin().get("/v1/capacity").json()
    assert cap["max_gpus"] == 2 and cap["max_gpus_from"] == "registered"
    assert cap["gpus_registered"] == 2


def test_batch_backlog_capacity_answers_match_openapi(head):
    import yaml  # python3-yaml: scripts/install-deps installs it
    from test_cli_openapi import SPEC_PATH, assert_valid
    with open(SPEC_PATH) as f:
        spec = yaml.safe_load(f)
    c = head.client(head.add_tenant("acme"))
    r = c.post("/v1/batches", {"jobs": [job(0), job(1)]})
    assert_valid(spec, "/v1/batches", "post", r)
    bid = r.json()["id"]
    assert_valid(spec, "/v1/batches", "post",
                 c.post("/v1/batches", {"jobs": [job(0), job(1, capability="nope")]}))
    assert_valid(spec, "/v1/batches", "get", c.get("/v1/batches"))
    assert_valid(spec, "/v1/batches/{id}", "get", c.get(f"/v1/batches/{bid}"))
    assert_valid(spec, "/v1/batches/{id}", "get", c.get("/v1/batches/424242"))
    assert_valid(spec, "/v1/batches/{id}", "delete", c.delete(f"/v1/batches/{bid}"))
    assert_valid(spec, "/v1/backlog", "get", c.get("/v1/backlog"))
    assert_valid(spec, "/v1/capacity", "get", head.admin().get("/v1/capacity"))
    assert_valid(spec, "/v1/capacity", "get", c.get("/v1/capacity"))


def test_batch_goes_through_admission_all_or_nothing(head_factory):
    # acme's bucket holds 4 jobs' worth of GPU-seconds and refills slowly.
    h = head_factory(config_text="[tenant.acme]\nrate_gpu_s_per_min = 0.5\n"
                                 "burst_gpu_s = 40\n")
    c = h.client(h.add_tenant("acme"))
    cost = c.post("/v1/batches", {"jobs": [job(0)]}).json()["backlog_gpu_s"]
    assert 0 < cost < 20
    n_fit = int((40 - cost) // cost)
    r = c.post("/v1/batches", {"jobs": [job(i) for i in range(n_fit + 3)]})
    assert r.status == 429, r
    assert int(r.header("Retry-After")) >= 1
    body = r.json()
    assert body["error"]["code"] == "overloaded" and body["reason"] == "rate"
    assert body["index"] == n_fit, body
    # Nothing of the refused batch was queued.
    assert len(c.get("/v1/jobs").json()["jobs"]) == 1
    assert len(c.get("/v1/batches").json()["batches"]) == 1
    assert c.get("/v1/backlog").json()["queued"] == 1
