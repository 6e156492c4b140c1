"""gpuq-sim: same seed gives the identical report; the simulator's mean waits
match queueing theory (M/M/1, M/M/c); the JSON report has the documented
shape; bad workloads are refused with the field named."""

import json
import math
import os
import subprocess

import pytest

from gpuq_harness import ROOT, binary

SIM = binary("gpuq-sim")
SEED7 = os.path.join(ROOT, "bench", "workloads", "seed7.json")

pytestmark = pytest.mark.skipif(not os.path.exists(SIM), reason="gpuq-sim not built")


def run_sim(*args, check=True):
    p = subprocess.run([SIM, *args], capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def mm_workload(path, servers, lam, duration_s, seed=11):
    """Poisson arrivals, exponential service of mean 1 s, models resident
    everywhere (no loads), no heating, no faults."""
    wl = {
        "name": f"mm{servers}", "seed": seed, "duration_s": duration_s,
        "fleet": [{"id": "g", "count": servers, "vram_mb": 32768,
                   "cooling": {"ambient_c": 30, "rise_c": 0, "tau_s": 60}, "preload": ["m"]}],
        "models": [{"name": "m", "vram_mb": 1000, "load_s": 1}],
        "capabilities": [{"name": "job", "model": "m", "run_s": 1.0, "dist": "exp"}],
        "arrivals": {"process": "poisson", "rate_per_s": lam},
    }
    path.write_text(json.dumps(wl))
    return str(path)


def erlang_c_wait(c, lam, mu):
    a = lam / mu
    rho = a / c
    head = sum(a ** k / math.factorial(k) for k in range(c))
    tail = a ** c / math.factorial(c) / (1 - rho)
    return tail / (head + tail) / (c * mu - lam)


def mean_wait(report, policy):
    return report[policy]["per_capability"]["job"]["wait_mean"]


def test_same_seed_same_report(tmp_path):
    a = run_sim("--workload", SEED7, "--policy", "all", "--json", "--no-timing").stdout
    b = run_sim("--workload", SEED7, "--policy", "all", "--json", "--no-timing").stdout
    assert a == b
    c = run_sim("--workload", SEED7, "--policy", "gpuq", "--json", "--no-timing",
                "--seed", "8").stdout
    assert json.loads(c)["gpuq"] != json.loads(a)["gpuq"]


def test_report_shape():
    out = json.loads(run_sim("--workload", SEED7, "--policy", "all", "--json").stdout)
    assert set(out) == {"gpuq", "rr", "least-loaded", "affinity", "affinity-ect", "pick-worker",
                        "shared-fifo", "oracle", "oracle-prio"}
    for pol, r in out.items():
        for key in ("latency", "slowdown", "throughput_per_hour", "utilization",
                    "cache_hit_ratio", "cold_loads", "slo_attainment", "completed", "failed",
                    "decision_us"):
            assert key in r, (pol, key)
        lat = r["latency"]["image.fast"]
        assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"]
        assert set(r["slowdown"]["image.fast"]) == {"p50", "p99"}
        assert r["slowdown"]["image.fast"]["p50"] >= 1.0
        assert 0 <= r["cache_hit_ratio"] <= 1
        assert 0 < r["utilization"] <= 1
        assert set(r["decision_us"]) == {"p50", "p99"}
        # Every policy ran the same arrivals to the end.
        assert r["completed"] + r["failed"] == out["gpuq"]["completed"] + out["gpuq"]["failed"]


def test_mm1_mean_wait_matches_formula(tmp_path):
    lam, mu = 0.5, 1.0
    wl = mm_workload(tmp_path / "mm1.json", 1, lam, 100000)
    want = (lam / mu) / (mu - lam)  # rho / (mu - lambda)
    for policy in ("gpuq", "pick-worker"):
        out = json.loads(run_sim("--workload", wl, "--policy", policy, "--json").stdout)
        got = mean_wait(out, policy)
        assert abs(got - want) / want < 0.05, (policy, got, want)


def test_mmc_mean_wait_matches_erlang_c(tmp_path):
    # pick-worker is a central FIFO queue: exactly M/M/c. (gpuq binds jobs to
    # bounded per-GPU queues early, so it is not an M/M/c queue.)
    c, lam, mu = 4, 3.0, 1.0
    wl = mm_workload(tmp_path / "mm4.json", c, lam, 60000)
    out = json.loads(run_sim("--workload", wl, "--policy", "pick-worker", "--json").stdout)
    want = erlang_c_wait(c, lam, mu)
    got = mean_wait(out, "pick-worker")
    assert abs(got - want) / want < 0.05, (got, want)


def test_bad_workload_names_the_field(tmp_path):
    bad = tmp_path / "bad.json"
    wl = json.loads(open(SEED7).read())
    wl["models"][0]["vram_mb"] = "lots"
    bad.write_text(json.dumps(wl))
    p = run_sim("--workload", str(bad), "--policy", "gpuq", check=False)
    assert p.returncode != 0
    assert "models[0].vram_mb" in p.stderr
    p = run_sim("--workload", SEED7, "--policy", "fifo-magic", check=False)
    assert p.returncode == 2
    assert "unknown policy" in p.stderr


FAULTY8 = os.path.join(ROOT, "bench", "workloads", "faulty8.json")
FAULTY8_CONTROL = os.path.join(ROOT, "bench", "workloads", "faulty8-control.json")


def short(path, tmp_path, duration_s=2400):
    """The workload cut to its first duration_s seconds (bounded run time)."""
    wl = json.loads(open(path).read())
    wl["duration_s"] = duration_s
    out = tmp_path / os.path.basename(path)
    out.write_text(json.dumps(wl))
    return str(out)


def test_faulty_gpu_quarantined_nothing_lost_no_retry_on_failed_gpu(tmp_path):
    # The breaker runs on its defaults (3 failures in 60 s or in 10 attempts).
    assert "breaker" not in json.loads(open(FAULTY8).read())["scheduler"]
    out = json.loads(run_sim("--workload", FAULTY8, "--policy", "all", "--json",
                             "--no-timing").stdout)
    g = out["gpuq"]
    bad = g["gpus"]["gpu-fail"]
    assert bad["quarantines"] >= 1
    assert bad["jobs_before_quarantine"] <= 20, bad
    # Every accepted job ends; a retry never goes back to a GPU that failed it.
    assert g["jobs_lost"] == 0
    assert g["retries_on_failed_gpu"] == 0
    assert g["completed"] + g["failed"] == sum(c["jobs"] for c in g["per_capability"].values())
    # Healthy GPUs are never quarantined; the hanging one's attempts end by lease.
    for gid, x in g["gpus"].items():
        if gid != "gpu-fail":
            assert x["quarantines"] == 0, gid
    assert g["gpus"]["gpu-hang"]["failures"] >= 1
    # The baselines have no breaker: the failing GPU keeps getting work.
    for pol in ("rr", "least-loaded", "affinity", "pick-worker"):
        r = out[pol]
        assert r["eta_error"] is None
        assert r["jobs_lost"] == 0, pol
        assert r["gpus"]["gpu-fail"]["quarantines"] == 0
        assert r["gpus"]["gpu-fail"]["attempts"] > bad["attempts"], pol
    # ETA error is reported per lane for gpuq.
    for lane in ("interactive", "batch"):
        e = g["eta_error"][lane]
        assert e["jobs"] > 0 and 0 <= e["p50"] <= e["p90"], (lane, e)


def test_default_breaker_never_quarantines_seed7(tmp_path):
    g = json.loads(run_sim("--workload", SEED7, "--policy", "gpuq", "--json",
                           "--no-timing").stdout)["gpuq"]
    assert sum(x["failures"] for x in g["gpus"].values()) > 0  # some faults happen
    for gid, x in g["gpus"].items():
        assert x["quarantines"] == 0, (gid, x)


def test_quarantine_keeps_image_fast_tail_near_the_control(tmp_path):
    f = json.loads(run_sim("--workload", short(FAULTY8, tmp_path), "--policy", "gpuq",
                           "--json", "--no-timing").stdout)["gpuq"]
    c = json.loads(run_sim("--workload", short(FAULTY8_CONTROL, tmp_path), "--policy", "gpuq",
                           "--json", "--no-timing").stdout)["gpuq"]
    assert f["latency"]["image.fast"]["p99"] <= 1.3 * c["latency"]["image.fast"]["p99"]


def test_gpu_faults_field_validated(tmp_path):
    wl = json.loads(open(FAULTY8).read())
    wl["fleet"][1]["faults"]["fail_share"] = 1.5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(wl))
    p = run_sim("--workload", str(bad), "--policy", "gpuq", check=False)
    assert p.returncode != 0
    assert "fleet[1].faults.fail_share" in p.stderr
