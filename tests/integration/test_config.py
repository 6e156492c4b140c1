"""gpuqd's configuration: the documented file is accepted as written, and a
bad setting stops gpuqd with the file, line, setting and reason."""

import os
import re
import subprocess

from gpuq_harness import ROOT, binary


def documented_config():
    with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
        return re.search(r"```ini\n(.*?)```", f.read(), re.S).group(1)


def test_documented_config_is_accepted(head_factory):
    h = head_factory(config_text=documented_config())
    key = h.add_tenant("acme")
    r = h.client(key).post("/v1/jobs", {"capability": "bg-remove"})
    assert r.status == 201 and r.json()["model"] == "bg-remove"


def test_config_extends_capabilities_and_models(head_factory):
    h = head_factory(config_text="[capabilities]\naudio.tts = tts-small\n\n"
                                 "[model.tts-small]\nvram_mb = 3000\nclass = utility\nrun_s = 0.8\n")
    c = h.client(h.add_tenant("acme"))
    job = c.post("/v1/jobs", {"capability": "audio.tts"}).json()
    assert job["model"] == "tts-small" and abs(job["cost_s"] - 0.8) < 0.01


def test_bad_config_names_line_and_setting(tmp_path):
    cases = [
        ("[jobs]\nmax_attempts = 0\n", "2: jobs.max_attempts"),
        ("[server]\nlisten = 127.0.0.1:0\n[nope]\nx = 1\n", "4: [nope]: unknown section"),
        ("[workers]\nttl_ms = fast\n", "2: workers.ttl_ms"),
        ("[capabilities]\nimage.x = missing-model\n", "capabilities.image.x"),
        ("[scheduler]\nhot_penalty = 0.5\n", "scheduler.hot_penalty"),
        ("just words\n", "1: expected 'key = value'"),
    ]
    for text, expect in cases:
        path = tmp_path / "bad.conf"
        path.write_text(text)
        p = subprocess.run([binary("gpuqd"), "--config", str(path), "--data",
                            str(tmp_path / "data"), "--listen", "127.0.0.1:0"],
                           capture_output=True, text=True, timeout=20)
        assert p.returncode == 2, (text, p.stderr)
        assert expect in p.stderr, (text, p.stderr)
        assert not (tmp_path / "data" / "head.url").exists()


def print_config(*args):
    p = subprocess.run([binary("gpuqd"), *args, "--print-config"], capture_output=True,
                       text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_print_config_round_trips_and_is_accepted(tmp_path, head_factory):
    first = print_config()
    # Every section a setting lives in is there, scheduler knobs included.
    for key in ("[scheduler]", "move_margin_s = 0.25", "evict_weight = 1", "free_tier_every = 4",
                "queue_depth = 2", "max_batch_jobs = 10000", "[capacity]", "[model.video]"):
        assert key in first, key
    path = tmp_path / "printed.conf"
    path.write_text(first)
    assert print_config("--config", str(path)) == first
    # A changed file prints its changes, and round-trips again.
    path.write_text(first.replace("move_margin_s = 0.25", "move_margin_s = 0.6")
                    .replace("lease_ms = 30000", "lease_ms = 12345")
                    + "\n[model.tts-small]\nvram_mb = 3000\nclass = utility\nrun_s = 0.8\n"
                    + "\n[capability.video]\nslo_s = 240\n")
    second = print_config("--config", str(path))
    assert "move_margin_s = 0.6" in second and "lease_ms = 12345" in second
    assert "[capability.video]\nmax_gpus = 0\nslo_s = 240\n" in second
    assert "[model.tts-small]" in second
    path2 = tmp_path / "second.conf"
    path2.write_text(second)
    assert print_config("--config", str(path2)) == second
    # Flags count too, and a real gpuqd starts on the printed file.
    assert "listen = 127.0.0.1:9999" in print_config("--listen", "127.0.0.1:9999")
    h = head_factory(config_text=second)
    assert h.client(h.add_tenant("acme")).post("/v1/jobs", {"capability": "bg-remove"}).status \
        == 201


def test_scheduler_knobs_are_checked(tmp_path):
    for text, expect in [("[scheduler]\nmove_margin_s = -1\n", "scheduler.move_margin_s"),
                         ("[scheduler]\nfree_tier_every = 0\n", "scheduler.free_tier_every"),
                         ("[scheduler]\nevict_weight = lots\n", "scheduler.evict_weight"),
                         ("[jobs]\nmax_batch_jobs = 0\n", "jobs.max_batch_jobs"),
                         ("[capacity]\nmax_gpus = -2\n", "capacity.max_gpus"),
                         ("[capability.video]\nslo_s = -1\n", "capability.video.slo_s"),
                         ("[capability.video]\nslo = 5\n", "capability.video.slo: unknown"),
                         ("[scheduler]\nnope = 1\n", "scheduler.nope: unknown setting")]:
        path = tmp_path / "bad.conf"
        path.write_text(text)
        p = subprocess.run([binary("gpuqd"), "--config", str(path), "--print-config"],
                           capture_output=True, text=True, timeout=20)
        assert p.returncode == 2 and expect in p.stderr, (text, p.stderr)


def test_cpu_runs_every_thread_on_that_cpu(head_factory):
    cpu = max(os.sched_getaffinity(0))
    h = head_factory(config_text="[server]\ncpu = %d\n" % cpu)
    r = h.client(h.add_tenant("acme")).post("/v1/jobs", {"capability": "bg-remove"})
    assert r.status == 201
    tasks = os.listdir("/proc/%d/task" % h.proc.pid)
    assert len(tasks) > 3  # event loops, committer, dispatcher, timers: all started
    for t in tasks:
        with open("/proc/%d/task/%s/status" % (h.proc.pid, t)) as f:
            allowed = [ln.split(":", 1)[1].strip() for ln in f
                       if ln.startswith("Cpus_allowed_list:")]
        assert allowed == [str(cpu)], (t, allowed)


def thread_policies(pid):
    """{thread name: scheduling policies} of every thread of pid (one that ends
    meanwhile is skipped)."""
    out = {}
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                out.setdefault(f.read().strip(), set()).add(os.sched_getscheduler(int(t)))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def test_sched_batch_puts_every_thread_under_sched_batch(head_factory, tmp_path):
    """sched_batch = true puts every gpuqd thread under SCHED_BATCH, so a thread
    woken by another does not preempt it (docs/configuration.md); by default
    they all keep the policy gpuqd was started with; a value that is neither
    is refused."""
    on = head_factory(config_text="[server]\nsched_batch = true\n", name="on")
    off = head_factory(name="off")
    for h in (on, off):  # every thread started: a submit went through them all
        assert h.client(h.add_tenant("acme")).post("/v1/jobs", {"capability": "bg-remove"}) \
            .status == 201
    want = {"gpuqd", "MHD-worker", "committer", "dispatcher", "checkpointer", "timers"}
    for h, policy in ((on, os.SCHED_BATCH), (off, os.sched_getscheduler(0))):
        got = thread_policies(h.proc.pid)
        assert want <= set(got), got
        assert all(p == {policy} for p in got.values()), (policy, got)
    path = tmp_path / "bad.conf"
    path.write_text("[server]\nsched_batch = sometimes\n")
    p = subprocess.run([binary("gpuqd"), "--config", str(path), "--print-config"],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and "server.sched_batch" in p.stderr, p.stderr


def test_cpu_gpuqd_may_not_use_is_refused(tmp_path):
    path = tmp_path / "cpu.conf"
    path.write_text("[server]\ncpu = 4095\n")
    p = subprocess.run([binary("gpuqd"), "--config", str(path), "--data", str(tmp_path / "data"),
                        "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=20)
    assert p.returncode == 1, p.stderr
    assert "server.cpu: gpuqd may not run on CPU 4095" in p.stderr, p.stderr
    assert not (tmp_path / "data" / "head.url").exists()
