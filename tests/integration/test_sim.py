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
    assert set(out) == {"gpuq", "rr", "least-loaded", "affinity", "pick-worker"}
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
