"""The gpuq CLI against a real gpuqd (127.0.0.1:0, temp dir): what a user and a
script rely on. Tenants and keys, submit/get/ls/cancel with --json matching
the API, errors that name the flag or field with a non-zero exit, the workers
table and drain, and `submit --wait` against a job that a fake worker (the
agent protocol spoken from this test) completes with PNG bytes."""

import json
import os
import subprocess
import threading

import pytest

from gpuq_harness import SLOW, FakeWorker, binary, tiny_png, wait_until

CLI_TIMEOUT_S = 30 * SLOW


def gpuq(head, *args, key=None, env=None, timeout=CLI_TIMEOUT_S):
    """Runs build/gpuq against head; returns the CompletedProcess."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("GPUQ_")}
    e["GPUQ_URL"] = head.url
    if key is not None:
        e["GPUQ_KEY"] = key
    # Keep the CLI from finding a real ~/.local/share/gpuq/admin.key.
    e["HOME"] = head.data_dir
    e.update(env or {})
    return subprocess.run([binary("gpuq"), *args], env=e, capture_output=True, text=True,
                          timeout=timeout)


def gpuq_json(head, *args, key=None):
    p = gpuq(head, *args, "--json", key=key)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return json.loads(p.stdout)


@pytest.fixture
def tenant(head):
    return head.add_tenant("acme")


# --- tenants and keys --------------------------------------------------------

def test_cli_tenant_add_prints_a_key_that_works(head):
    t = gpuq_json(head, "tenant", "add", "acme", "--tier", "free", key=head.admin_key)
    assert t["name"] == "acme" and t["tier"] == "free"
    assert t["key"]
    r = head.client(t["key"]).get("/v1/jobs")
    assert r.status == 200, r

    # Human form: the key alone on stdout, so that KEY=$(gpuq tenant add …) works.
    p = gpuq(head, "tenant", "add", "globex", key=head.admin_key)
    assert p.returncode == 0, p.stderr
    key = p.stdout.strip()
    assert key and "\n" not in key
    assert head.client(key).get("/v1/jobs").status == 200

    listed = gpuq_json(head, "tenant", "ls", key=head.admin_key)
    names = {x["name"]: x["tier"] for x in listed["tenants"]}
    assert names.get("acme") == "free" and names.get("globex") == "paid"
    assert key not in json.dumps(listed)
    p = gpuq(head, "tenant", "ls", key=head.admin_key)
    assert p.returncode == 0 and "acme" in p.stdout and "globex" in p.stdout


def test_cli_admin_commands_read_admin_key_from_data_dir(head):
    p = gpuq(head, "tenant", "add", "initech", "--json", env={"GPUQ_DATA": head.data_dir})
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["name"] == "initech"
    # Without a key and without a readable admin.key, it says what to do.
    p = gpuq(head, "tenant", "ls", env={"GPUQ_DATA": os.path.join(head.data_dir, "nowhere")})
    assert p.returncode == 2 and "GPUQ_KEY" in p.stderr


def test_cli_tenant_key_cannot_do_admin_work(head, tenant):
    p = gpuq(head, "tenant", "add", "mallory", key=tenant)
    assert p.returncode == 1
    assert "forbidden" in p.stderr or "unauthorized" in p.stderr


def test_cli_worker_token_add(head):
    t = gpuq_json(head, "worker-token", "add", "rack1", key=head.admin_key)
    assert t["token"] and t.get("name") == "rack1"
    FakeWorker(head, t["token"], "rack1-gpu0").register()


# --- jobs ----------------------------------------------------------------------

def test_cli_submit_get_ls_cancel_json_match_the_api(head, tenant):
    job = gpuq_json(head, "submit", "--capability", "image.fast", "--prompt", "a fox",
                    "--width", "512", "--height", "768", "--steps", "20", "--seed", "7",
                    "--lane", "batch", "--priority", "free", key=tenant)
    assert job["state"] == "queued"
    assert job["capability"] == "image.fast" and job["lane"] == "batch"
    assert job["priority"] == "free"
    assert job["params"]["prompt"] == "a fox"
    assert (job["params"]["width"], job["params"]["height"]) == (512, 768)
    assert job["params"]["steps"] == 20 and job["params"]["seed"] == 7
    jid = job["id"]

    api = head.client(tenant).get(f"/v1/jobs/{jid}").json()
    got = gpuq_json(head, "get", jid, key=tenant)
    for k in ("id", "state", "capability", "model", "params", "lane", "priority"):
        assert got[k] == api[k], k

    # Without --json, submit prints the id alone; get prints a readable view.
    p = gpuq(head, "submit", "--capability", "image.fast", "--prompt", "a cat", key=tenant)
    assert p.returncode == 0, p.stderr
    jid2 = p.stdout.strip()
    p = gpuq(head, "get", jid2, key=tenant)
    assert p.returncode == 0 and "queued" in p.stdout and "image.fast" in p.stdout

    ls = gpuq_json(head, "ls", key=tenant)
    ids = [j["id"] for j in ls["jobs"]]
    assert ids[:2] == [jid2, jid]  # newest first
    only = gpuq_json(head, "ls", "--limit", "1", key=tenant)
    assert [j["id"] for j in only["jobs"]] == [jid2]
    p = gpuq(head, "ls", "--state", "queued", key=tenant)
    assert p.returncode == 0 and jid in p.stdout and jid2 in p.stdout

    c = gpuq_json(head, "cancel", jid, key=tenant)
    assert c["state"] == "cancelled"
    assert head.client(tenant).get(f"/v1/jobs/{jid}").json()["state"] == "cancelled"
    assert [j["id"] for j in gpuq_json(head, "ls", "--state", "cancelled", key=tenant)["jobs"]] \
        == [jid]
    # Cancelling an ended job is refused: non-zero exit, the server's reason.
    p = gpuq(head, "cancel", jid, key=tenant)
    assert p.returncode == 1 and "conflict" in p.stderr


def test_cli_idempotency_key_returns_the_first_job(head, tenant):
    args = ("submit", "--capability", "image.fast", "--prompt", "x", "--idempotency-key", "o-17")
    a = gpuq_json(head, *args, key=tenant)
    b = gpuq_json(head, *args, key=tenant)
    assert a["id"] == b["id"]


def test_cli_param_flag_reaches_the_job(head, tenant):
    job = gpuq_json(head, "submit", "--capability", "image.fast", "--param", "guidance=7.5",
                    "--param", "negative_prompt=blurry", key=tenant)
    assert job["params"]["guidance"] == 7.5
    assert job["params"]["negative_prompt"] == "blurry"


def test_cli_tenants_see_only_their_jobs(head, tenant):
    other = head.add_tenant("globex")
    jid = gpuq_json(head, "submit", "--capability", "image.fast", key=tenant)["id"]
    p = gpuq(head, "get", jid, key=other)
    assert p.returncode == 1 and "not_found" in p.stderr
    assert gpuq_json(head, "ls", key=other)["jobs"] == []


# --- errors ----------------------------------------------------------------------

@pytest.mark.parametrize("args,names", [
    (["submit", "--capability", "image.fast", "--bogus", "1"], "--bogus"),
    (["submit", "--capability", "image.fast", "--width", "wide"], "--width"),
    (["submit", "--capability", "image.fast", "--lane", "express"], "--lane"),
    (["submit", "--capability", "image.fast", "--priority", "gold"], "--priority"),
    (["submit", "--capability", "image.fast", "--param", "novalue"], "--param"),
    (["submit", "--prompt", "no capability"], "--capability"),
    (["submit", "--capability", "image.fast", "--output", "x.png"], "--wait"),
    (["ls", "--limit", "0"], "--limit"),
    (["ls", "--state", "sleeping"], "--state"),
    (["get"], "job id"),
    (["tenant", "add", "x", "--tier", "gold"], "--tier"),
    (["tenant"], "subcommand"),
    (["frobnicate"], "frobnicate"),
])
def test_cli_usage_errors_name_the_flag(head, tenant, args, names):
    p = gpuq(head, *args, key=tenant)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert names in p.stderr
    assert p.stdout == ""


@pytest.mark.parametrize("args,field", [
    (["--width", "100000"], "params.width"),
    (["--steps", "0"], "params.steps"),
    (["--param", "guidance=500"], "params.guidance"),
])
def test_cli_server_refusals_name_the_field(head, tenant, args, field):
    p = gpuq(head, "submit", "--capability", "image.fast", *args, key=tenant)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert field in p.stderr
    assert p.stdout == ""
    assert head.client(tenant).get("/v1/jobs").json()["jobs"] == []  # nothing half-created


def test_cli_bad_key_and_unknown_job(head, tenant):
    p = gpuq(head, "ls", key="gq_not-a-real-key")
    assert p.returncode == 1 and "unauthorized" in p.stderr
    assert "gq_not-a-real-key" not in p.stderr  # secrets are never printed
    p = gpuq(head, "get", "987654", key=tenant)
    assert p.returncode == 1 and "not_found" in p.stderr


def test_cli_unreachable_server_exits_3(head, tenant):
    p = gpuq(head, "ls", "--url", "http://127.0.0.1:1", key=tenant)
    assert p.returncode == 3 and "127.0.0.1:1" in p.stderr


def test_cli_help(head):
    p = gpuq(head, "--help")
    assert p.returncode == 0 and "submit" in p.stdout and "workers" in p.stdout
    p = gpuq(head, "submit", "--help")
    assert p.returncode == 0 and "--capability" in p.stdout and "--wait" in p.stdout
    p = gpuq(head, "help", "tenant", "add")
    assert p.returncode == 0 and "--tier" in p.stdout


# --- workers, and --wait against a fake worker (the agent protocol from Python) ---

def ready_worker(head, worker_id="testhost-gpu0"):
    return FakeWorker(head, head.add_worker_token(), worker_id, vram_mb=24576,
                      models=[{"name": "image-v2", "vram_mb": 8200, "load_ms": 10,
                               "class": "generation", "pinned": True, "loaded": True}]).start()


def test_cli_workers_table_and_drain(head, tenant):
    ready_worker(head, "testhost-gpu0")
    FakeWorker(head, head.add_worker_token(), "testhost-gpu9", ahead=1).start()
    p = gpuq(head, "workers", key=head.admin_key)
    assert p.returncode == 0, p.stderr
    rows = {line.split()[0]: line for line in p.stdout.splitlines()[1:]}
    row = rows.get("testhost-gpu0")
    assert row, p.stdout
    assert "50C" in row and "image-v2" in row and "8200/24576" in row
    assert " 0/1 " in row, row
    # One that may hold a job ahead says so beside its slots.
    assert " 0/1+1 " in rows.get("testhost-gpu9", ""), p.stdout
    ws = gpuq_json(head, "workers", key=head.admin_key)["workers"]
    assert sorted(w["id"] for w in ws) == ["testhost-gpu0", "testhost-gpu9"]

    p = gpuq(head, "drain", "testhost-gpu0", key=head.admin_key)
    assert p.returncode == 0, p.stderr
    p = gpuq(head, "drain", "no-such-worker", key=head.admin_key)
    assert p.returncode == 1 and "not_found" in p.stderr


def test_cli_drain_reaches_the_agent(head):
    w = ready_worker(head, "testhost-gpu1")
    assert gpuq(head, "drain", "testhost-gpu1", key=head.admin_key).returncode == 0
    assert w.heartbeat("ready").json().get("drain") is True


def test_cli_submit_wait_shows_progress_and_writes_the_result(head, tenant, tmp_path):
    w = ready_worker(head)
    png = tiny_png()
    errors = []

    def work():
        try:
            a = None
            deadline_polls = 6
            while a is None and deadline_polls > 0:
                a = w.poll(wait=5)
                deadline_polls -= 1
            assert a is not None, "no assignment reached the fake worker"
            assert w.progress(a, "loading", 0.0).status == 200
            assert w.progress(a, "generating", 0.5).status == 200
            assert w.complete(a, png).status == 200
        except Exception as e:  # reported by the main thread
            errors.append(e)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    out = tmp_path / "fox.png"
    p = gpuq(head, "submit", "--capability", "image.fast", "--prompt", "a fox", "--wait",
             "--output", str(out), key=tenant)
    t.join(timeout=60 * SLOW)
    assert not errors, errors
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert out.read_bytes() == png
    assert "succeeded" in p.stderr
    assert str(out) in p.stdout
    # Progress was shown while waiting: at least the submit and the final state.
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith(("submitted", "job "))]
    assert len(lines) >= 2, p.stderr


def test_cli_submit_wait_default_output_name_and_json(head, tenant, tmp_path):
    w = ready_worker(head)
    png = tiny_png(16, 16, seed=3)

    def work():
        a = None
        for _ in range(6):
            a = w.poll(wait=5)
            if a:
                break
        if a:
            assert w.complete(a, png).status == 200

    t = threading.Thread(target=work, daemon=True)
    t.start()
    e = {k: v for k, v in os.environ.items() if not k.startswith("GPUQ_")}
    e.update(GPUQ_URL=head.url, GPUQ_KEY=tenant, HOME=str(tmp_path))
    p = subprocess.run([os.path.abspath(binary("gpuq")), "submit", "--capability", "image.fast",
                        "--wait", "--json"], env=e, cwd=tmp_path, capture_output=True, text=True,
                       timeout=CLI_TIMEOUT_S * 2)
    t.join(timeout=60 * SLOW)
    assert p.returncode == 0, p.stderr
    job = json.loads(p.stdout)
    assert job["state"] == "succeeded"
    assert job["output_file"] == f"{job['id']}.png"
    assert (tmp_path / f"{job['id']}.png").read_bytes() == png


def test_cli_submit_wait_exits_nonzero_when_the_job_is_cancelled(head, tenant):
    proc = subprocess.Popen(
        [binary("gpuq"), "submit", "--capability", "image.fast", "--wait"],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("GPUQ_")},
             "GPUQ_URL": head.url, "GPUQ_KEY": tenant, "HOME": head.data_dir},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        api = head.client(tenant)
        jobs = wait_until(lambda: api.get("/v1/jobs").json()["jobs"], 10, "the job to exist")
        assert api.delete(f"/v1/jobs/{jobs[0]['id']}").status == 200
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert "cancelled" in err


def test_cli_dead_jobs_attempts_and_resubmit(head_factory):
    h = head_factory(config_text="[lifecycle]\nmax_attempts = 1\n")
    key = h.add_tenant("acme")
    w = FakeWorker(h, h.add_worker_token()).start()
    job = gpuq_json(h, "submit", "--capability", "image.fast", "--prompt", "a fox", key=key)
    a = w.poll()
    assert a["job_id"] == job["id"]
    assert w.fail(a, "cuda", "illegal memory access").status == 200
    # Dead-lettered: listed by state, with its attempts in `gpuq get`.
    dead = gpuq_json(h, "ls", "--state", "dead", key=key)
    assert [j["id"] for j in dead["jobs"]] == [job["id"]]
    p = gpuq(h, "get", job["id"], key=key)
    assert p.returncode == 0, p.stderr
    assert "dead" in p.stdout and "attempts" in p.stdout
    assert "#1" in p.stdout and w.id in p.stdout and "cuda" in p.stdout
    assert "illegal memory access" in p.stdout
    # Only the admin re-submits.
    assert gpuq(h, "resubmit", job["id"], key=key).returncode != 0
    p = gpuq(h, "resubmit", job["id"], key=h.admin_key)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"job {job['id']}: queued"
    b = w.poll()
    assert b["job_id"] == job["id"] and b["attempt"] == 2
    assert w.complete(b).status == 200
    assert gpuq_json(h, "get", job["id"], key=key)["state"] == "succeeded"


def test_cli_workers_shows_a_quarantined_gpu_and_why(head_factory):
    h = head_factory(config_text="[lifecycle]\nmax_attempts = 5\n"
                     "[breaker]\nfailures = 2\nwindow_ms = 60000\ncooldown_ms = 600000\n")
    key = h.add_tenant("acme")
    w = FakeWorker(h, h.add_worker_token(), "gpu-bad").start()
    gpuq_json(h, "submit", "--capability", "image.fast", "--prompt", "a fox", key=key)
    for attempt in (1, 2):
        a = w.poll()
        assert a["attempt"] == attempt
        assert w.fail(a, "cuda", "illegal memory access").status == 200

    def quarantined():
        ws = gpuq_json(h, "workers", key=h.admin_key)["workers"]
        return ws[0] if ws and ws[0]["state"] == "quarantined" else None

    view = wait_until(quarantined, 5, "the worker to be quarantined")
    p = gpuq(h, "workers", key=h.admin_key)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    row = [i for i, line in enumerate(lines) if line.startswith("gpu-bad")]
    assert row and "quarantined" in lines[row[0]], p.stdout
    assert lines[row[0] + 1].strip() == view["breaker"]["reason"], p.stdout
