"""GET /metrics (R35): the Prometheus text format, checked by promtool on a real
scrape after jobs ran, one failed and one was retried; counters and histograms
that must move do; the optional bearer token is enforced."""

import os
import re
import shutil
import subprocess

import pytest

from gpuq_harness import FakeWorker, wait_until

JOB = {"capability": "image.fast", "params": {"prompt": "a fox", "width": 512, "height": 512}}
TOKEN = "scrape-secret-0123456789"


def scrape(head, key=None):
    r = head.client(key).get("/metrics")
    assert r.status == 200, r
    assert r.header("Content-Type").startswith("text/plain; version=0.0.4"), r.headers
    return r.body.decode()


def value(text, name, **labels):
    """The value of the one sample of name with these labels (others ignored); 0 if absent."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, f"malformed sample line: {line!r}"
        if m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(4))
    return 0.0


def promtool_check(text, tmp_path):
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.fail("promtool not found: scripts/install-deps installs Debian's prometheus")
    p = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()


def run_one(c, worker):
    r = c.post("/v1/jobs", JOB)
    assert r.status == 201, r
    a = wait_until(lambda: worker.poll(wait=2), 20, "an assignment")
    assert worker.progress(a, "generating", 0.5).status == 200
    assert worker.complete(a).status == 200
    return r.json()["id"]


def test_scrape_passes_promtool_and_values_move(head, tmp_path):
    c = head.client(head.add_tenant("acme"))
    w0 = FakeWorker(head, head.add_worker_token(), worker_id="gpu0").start()

    before = scrape(head)
    promtool_check(before, tmp_path)
    labels = {"capability": "image.fast", "model": "image-v2", "lane": "interactive"}
    done0 = value(before, "gpuq_jobs_finished_total", state="succeeded", **labels)
    lat0 = value(before, "gpuq_job_latency_seconds_count", **labels)

    run_one(c, w0)

    # A failure that is retried on another GPU, then succeeds there.
    r = c.post("/v1/jobs", JOB)
    assert r.status == 201, r
    a = wait_until(lambda: w0.poll(wait=2), 20, "the second job's assignment")
    f = w0.fail(a, cls="oom", message="CUDA out of memory")
    assert f.status == 200 and f.json().get("retried") is True, f
    w1 = FakeWorker(head, head.add_worker_token("more"), worker_id="gpu1").start()
    b = wait_until(lambda: w1.poll(wait=2), 20, "the retry's assignment on gpu1")
    assert b["attempt"] == 2
    assert w1.complete(b).status == 200

    after = scrape(head)
    promtool_check(after, tmp_path)
    assert value(after, "gpuq_jobs_finished_total", state="succeeded", **labels) == done0 + 2
    assert value(after, "gpuq_job_latency_seconds_count", **labels) == lat0 + 2
    assert value(after, "gpuq_job_latency_seconds_bucket", le="+Inf", **labels) == lat0 + 2
    assert value(after, "gpuq_job_run_seconds_count", **labels) == 2
    assert value(after, "gpuq_job_wait_seconds_count", **labels) == 2
    assert value(after, "gpuq_attempt_failures_total", **{"class": "oom"}) == 1
    assert value(after, "gpuq_job_retries_total") == 1
    assert value(after, "gpuq_jobs_submitted_total", **labels) == 2
    assert value(after, "gpuq_scheduler_decision_seconds_count") >= 2
    assert value(after, "gpuq_store_commit_seconds_count") > value(before,
                                                                   "gpuq_store_commit_seconds_count")
    assert value(after, "gpuq_eta_error_seconds_count") >= 1
    # Per GPU: both registered, ready, with their telemetry and loaded model.
    for w in ("gpu0", "gpu1"):
        assert value(after, "gpuq_gpu_state", worker=w, state="ready") == 1
        # One series per GPU: its current state only.
        assert len(re.findall(r'^gpuq_gpu_state\{worker="%s",' % w, after, re.M)) == 1
        assert value(after, "gpuq_gpu_temperature_celsius", worker=w) == 50
        assert value(after, "gpuq_gpu_memory_total_bytes", worker=w) == 32000 * 1048576
        assert value(after, "gpuq_gpu_model_loaded", worker=w, model="image-v2") == 1
    assert value(after, "gpuq_build_info") == 1


def test_queue_depth_and_backlog_per_tenant(head):
    c = head.client(head.add_tenant("acme"))
    d = head.client(head.add_tenant("beta"))
    ids = [c.post("/v1/jobs", JOB).json()["id"] for _ in range(3)]
    assert d.post("/v1/jobs", dict(JOB, lane="batch")).status == 201
    text = scrape(head)
    promtool_check(text, None)
    assert value(text, "gpuq_queue_depth_jobs", capability="image.fast", lane="interactive",
                 tenant="acme") == 3
    assert value(text, "gpuq_queue_depth_jobs", capability="image.fast", lane="batch",
                 tenant="beta") == 1
    assert value(text, "gpuq_queue_backlog_gpu_seconds", capability="image.fast",
                 lane="interactive", tenant="acme") > 0
    assert value(text, "gpuq_jobs", state="queued") == 4
    # The counts follow the jobs: a cancelled job leaves its queue.
    assert c.delete(f"/v1/jobs/{ids[0]}").status == 200
    text = scrape(head)
    assert value(text, "gpuq_queue_depth_jobs", capability="image.fast", lane="interactive",
                 tenant="acme") == 2
    assert value(text, "gpuq_jobs", state="queued") == 3
    assert value(text, "gpuq_jobs", state="cancelled") == 1


def test_label_values_are_escaped(head):
    w = FakeWorker(head, head.add_worker_token(), worker_id="gpu0")
    r = w.c.post("/v1/agent/register", {
        "protocol": 1, "worker_id": "gpu0", "host": "testhost",
        "gpu": {"index": 0, "name": 'Fake "Q" \\ GPU', "uuid": "GPU-0", "vram_total_mb": 32000},
        "capabilities": ["image.fast"], "concurrency": 1, "models": w.models})
    assert r.status == 200, r
    text = scrape(head)
    promtool_check(text, None)
    assert 'name="Fake \\"Q\\" \\\\ GPU"' in text


def test_bearer_token_guards_the_scrape(head_factory):
    head = head_factory(config_text=f"[metrics]\ntoken = {TOKEN}\n")
    r = head.client(None).get("/metrics")
    assert r.status == 401, r
    assert r.json()["error"]["field"] == "Authorization"
    assert head.client("wrong-token-0123456789").get("/metrics").status == 401
    assert head.admin().get("/metrics").status == 401  # the admin key is not the scrape token
    text = scrape(head, TOKEN)
    assert "gpuq_build_info" in text


@pytest.mark.parametrize("line,field", [("token = short", b"metrics.token"),
                                        ("trace_max_bytes = 100", b"metrics.trace_max_bytes"),
                                        ("trace_max_steps = 2", b"metrics.trace_max_steps")])
def test_bad_metrics_setting_is_refused(tmp_path, line, field):
    from gpuq_harness import binary
    conf = tmp_path / "bad.conf"
    conf.write_text(f"[metrics]\n{line}\n")
    p = subprocess.run([binary("gpuqd"), "--config", str(conf), "--data", str(tmp_path / "d"),
                        "--listen", "127.0.0.1:0"], capture_output=True, timeout=30)
    assert p.returncode != 0
    assert field in p.stdout + p.stderr
