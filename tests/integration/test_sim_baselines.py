"""gpuq-sim's measuring stick: the shared-queue references match queueing
theory in closed form (Erlang C for M/M/4 at rho = 0.85, Pollaczek-Khinchine
for M/D/1 at rho = 0.8); gpuq's own mean wait is held to the same forms; no
baseline sends a job to a GPU that cannot hold its model, nor waits forever
on a job no GPU can run; every figure is reported beside the oracle's.

The closed forms are evaluated at the rates the run actually drew (arrivals
per second of the run, mean service of its jobs): at rho = 0.85 a 1% error
in rho moves the mean wait by about 6%, which would otherwise swamp the
comparison. The runs are deterministic (the workload's fixed seed)."""

import json
import math
import os
import subprocess

import pytest

from gpuq_harness import ROOT, SANITIZED, binary

SIM = binary("gpuq-sim")
WL = os.path.join(ROOT, "bench", "workloads")
MM4 = os.path.join(WL, "mm4-rho85.json")
MD1 = os.path.join(WL, "md1-rho80.json")

pytestmark = pytest.mark.skipif(not os.path.exists(SIM), reason="gpuq-sim not built")

# The closed-form checks run 300k-400k jobs each: a property of the
# simulator's arithmetic, not of its memory safety, which the lighter tests
# below exercise under the sanitizers too.
heavy = pytest.mark.skipif(SANITIZED, reason="long statistical runs; not under sanitizers")

ALL = {"gpuq", "rr", "least-loaded", "affinity", "affinity-ect", "pick-worker", "shared-fifo",
       "oracle", "oracle-prio"}


def sim(workload, policy, *extra, check=True):
    p = subprocess.run([SIM, "--workload", workload, "--policy", policy, "--json", "--no-timing",
                        *extra], capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def report(workload, policy):
    return json.loads(sim(workload, policy).stdout)


def erlang_c_wait(c, lam, mu):
    a = lam / mu
    rho = a / c
    assert rho < 1
    head = sum(a ** k / math.factorial(k) for k in range(c))
    tail = a ** c / math.factorial(c) / (1 - rho)
    return tail / (head + tail) / (c * mu - lam)


def pk_wait(lam, mean_s, second_moment):
    """Pollaczek-Khinchine mean wait of M/G/1."""
    rho = lam * mean_s
    assert rho < 1
    return lam * second_moment / (2 * (1 - rho))


def drawn(wl_path, r):
    """(arrival rate, mean service, mean wait) of the one capability "job"."""
    wl = json.load(open(wl_path))
    j = r["per_capability"]["job"]
    assert j["completed"] == j["jobs"] > 0
    lam = j["jobs"] / wl["duration_s"]
    return lam, j["latency_mean"] - j["wait_mean"], j["wait_mean"]


def test_workloads_are_what_they_say():
    mm = json.load(open(MM4))
    servers = mm["fleet"][0]["count"]
    lam, run = mm["arrivals"]["rate_per_s"], mm["capabilities"][0]["run_s"]
    assert mm["capabilities"][0]["dist"] == "exp" and mm["arrivals"]["process"] == "poisson"
    assert lam * run / servers == pytest.approx(0.85)
    md = json.load(open(MD1))
    assert md["fleet"][0]["count"] == 1 and md["capabilities"][0]["cv"] == 0
    assert md["arrivals"]["rate_per_s"] * md["capabilities"][0]["run_s"] == pytest.approx(0.8)


@heavy
def test_shared_queue_mean_wait_matches_erlang_c():
    out = report(MM4, "shared-fifo,oracle")
    c = json.load(open(MM4))["fleet"][0]["count"]
    for pol in ("shared-fifo", "oracle"):
        lam, svc, got = drawn(MM4, out[pol])
        want = erlang_c_wait(c, lam, 1 / svc)
        assert abs(got - want) / want < 0.04, (pol, got, want)
    # Everything resident, nothing to load: the oracle is the shared queue.
    assert out["oracle"]["per_capability"] == out["shared-fifo"]["per_capability"]


# gpuq's mean wait against Erlang C on mm4-rho85 (seed 85), the issue 16
# target of 3%: +11.0% before the scheduler work of issue 16 (early binding
# into depth-2 queues behind overdue jobs), +2.8% after it (closed form at
# the drawn rates).
@heavy
def test_gpuq_mean_wait_within_3pct_of_erlang_c():
    out = report(MM4, "gpuq")
    c = json.load(open(MM4))["fleet"][0]["count"]
    lam, svc, got = drawn(MM4, out["gpuq"])
    want = erlang_c_wait(c, lam, 1 / svc)
    assert abs(got - want) / want < 0.03, (got, want)


@heavy
def test_md1_mean_wait_matches_pollaczek_khinchine():
    out = report(MD1, "gpuq,shared-fifo")
    for pol in ("gpuq", "shared-fifo"):
        lam, svc, got = drawn(MD1, out[pol])
        assert svc == pytest.approx(json.load(open(MD1))["capabilities"][0]["run_s"])
        want = pk_wait(lam, svc, svc * svc)  # deterministic service: E[S^2] = S^2
        assert abs(got - want) / want < 0.03, (pol, got, want)


def priority_wait(c, lams, mu):
    """Mean wait of each class of the non-preemptive priority M/M/c queue
    with one service rate for all classes, class 0 served first (Cobham's
    form with Erlang C): W_k = C(c, a) / (c mu (1 - s_{k-1}) (1 - s_k)),
    s_k the load of classes 0..k. Their arrival-weighted mean is Erlang C's."""
    lam = sum(lams)
    a = lam / mu
    head = sum(a ** k / math.factorial(k) for k in range(c))
    tail = a ** c / math.factorial(c) / (1 - a / c)
    wait_p = tail / (head + tail)
    out, before = [], 0.0
    for li in lams:
        upto = before + li / (c * mu)
        out.append(wait_p / (c * mu * (1 - before) * (1 - upto)))
        before = upto
    return out


def two_lane_mm4(path, duration_s):
    """mm4-rho85 with its arrivals split over two capabilities of the same
    model and run time: 35% interactive, 65% batch."""
    wl = json.load(open(MM4))
    wl["duration_s"] = duration_s
    wl["capabilities"] = [
        {"name": "now", "model": "m", "run_s": 2.0, "dist": "exp", "weight": 0.35},
        {"name": "later", "model": "m", "run_s": 2.0, "dist": "exp", "weight": 0.65,
         "lane": "batch"}]
    path.write_text(json.dumps(wl))
    return str(path)


@heavy
def test_oracle_prio_mean_waits_match_priority_mmc(tmp_path):
    """oracle-prio serves the interactive lane first, without preemption: on
    M/M/4 at rho = 0.85 each lane's mean wait is the priority queue's closed
    form (at the drawn rates), and the oracle's stays Erlang C's."""
    path = two_lane_mm4(tmp_path / "mm4-lanes.json", 240000)
    out = report(path, "oracle,oracle-prio")
    c = json.load(open(MM4))["fleet"][0]["count"]
    caps = out["oracle-prio"]["per_capability"]
    lams = [caps[k]["jobs"] / 240000 for k in ("now", "later")]
    busy = sum(caps[k]["completed"] * (caps[k]["latency_mean"] - caps[k]["wait_mean"])
               for k in ("now", "later"))
    mu = sum(caps[k]["completed"] for k in ("now", "later")) / busy
    want = priority_wait(c, lams, mu)
    for k, w in zip(("now", "later"), want):
        got = caps[k]["wait_mean"]
        assert abs(got - w) / w < 0.04, (k, got, w)
    # Interactive-first moves wait from one lane to the other: the
    # interactive lane waits far less than under the oracle's one FIFO.
    o = out["oracle"]["per_capability"]
    assert caps["now"]["wait_mean"] < 0.3 * o["now"]["wait_mean"]
    assert caps["later"]["wait_mean"] > o["later"]["wait_mean"]
    lam = sum(lams)
    fifo = erlang_c_wait(c, lam, mu)
    oracle_mean = sum(o[k]["jobs"] * o[k]["wait_mean"] for k in ("now", "later")) / (lam * 240000)
    assert abs(oracle_mean - fifo) / fifo < 0.04, (oracle_mean, fifo)


def test_oracle_prio_is_the_oracle_with_one_lane():
    # seed7 has no batch lane: serving it first changes nothing.
    out = report(os.path.join(WL, "seed7.json"), "oracle,oracle-prio")
    assert out["oracle-prio"]["per_capability"] == out["oracle"]["per_capability"]
    assert out["oracle-prio"]["cold_loads"] == 0


def test_oracle_prio_serves_the_interactive_lane_first(tmp_path):
    """A short run of the two-lane queue (light enough for the sanitizers):
    the interactive lane waits less, the batch lane more, than in the FIFO."""
    path = two_lane_mm4(tmp_path / "short.json", 4000)
    out = report(path, "oracle,oracle-prio")
    p, o = out["oracle-prio"]["per_capability"], out["oracle"]["per_capability"]
    assert p["now"]["jobs"] == o["now"]["jobs"] > 0
    assert p["now"]["wait_mean"] < o["now"]["wait_mean"]
    assert p["later"]["wait_mean"] > o["later"]["wait_mean"]
    # Non-preemptive and work-conserving: the same jobs finish, nothing is lost.
    assert out["oracle-prio"]["completed"] == out["oracle"]["completed"]


def nofit_workload(path):
    """Two 16 GB GPUs and one 48 GB: a 30 GB model fits only the large one,
    an 80 GB model fits none."""
    wl = {
        "name": "nofit", "seed": 3, "duration_s": 2000,
        "fleet": [{"id": "s", "count": 2, "vram_mb": 16384, "preload": ["small"]},
                  {"id": "b", "count": 1, "vram_mb": 49152}],
        "models": [{"name": "small", "vram_mb": 8192, "load_s": 2},
                   {"name": "mid", "vram_mb": 30720, "load_s": 4},
                   {"name": "huge", "vram_mb": 81920, "load_s": 4}],
        "capabilities": [{"name": "a", "model": "small", "weight": 0.7, "run_s": 1.0},
                         {"name": "m", "model": "mid", "weight": 0.2, "run_s": 2.0},
                         {"name": "h", "model": "huge", "weight": 0.1, "run_s": 1.0}],
        "arrivals": {"process": "poisson", "rate_per_s": 0.8},
    }
    path.write_text(json.dumps(wl))
    return str(path)


def test_no_baseline_blocks_on_a_job_that_can_never_run(tmp_path):
    out = json.loads(sim(nofit_workload(tmp_path / "nofit.json"), "all").stdout)
    assert set(out) == ALL
    for pol in ALL - {"gpuq"}:
        r = out[pol]
        caps = r["per_capability"]
        # The jobs no GPU can hold are refused at once; everything else ends.
        assert r["rejected"] == caps["h"]["jobs"] > 0, pol
        assert r["unfinished"] == 0, pol
        assert caps["a"]["completed"] == caps["a"]["jobs"], pol
        assert caps["m"]["completed"] == caps["m"]["jobs"], pol
    # gpuq (which parks such a job for a GPU that may yet join) still serves
    # the rest of its queue.
    g = out["gpuq"]["per_capability"]
    assert g["a"]["completed"] == g["a"]["jobs"] and g["m"]["completed"] == g["m"]["jobs"]


def test_vram_fit_every_baseline_sends_big_models_only_where_they_fit(tmp_path):
    wl = json.loads(open(nofit_workload(tmp_path / "n.json")).read())
    wl["capabilities"] = [c for c in wl["capabilities"] if c["name"] == "m"]
    for f in wl["fleet"]:
        f.pop("preload", None)
    path = tmp_path / "mid-only.json"
    path.write_text(json.dumps(wl))
    out = json.loads(sim(str(path), "all").stdout)
    for pol, r in out.items():
        assert r["gpus"]["s0"]["attempts"] == r["gpus"]["s1"]["attempts"] == 0, pol
        assert r["completed"] == r["per_capability"]["m"]["jobs"], pol


def test_every_figure_beside_the_oracle():
    out = report(os.path.join(WL, "seed7.json"), "gpuq,pick-worker,oracle")
    for pol, r in out.items():
        vs = r["vs_oracle"]
        for cap, lat in r["latency"].items():
            o = out["oracle"]["latency"][cap]
            # (the JSON rounds every figure to 4 decimals)
            assert vs[cap]["p50"] == pytest.approx(lat["p50"] / o["p50"], rel=1e-3)
            assert vs[cap]["p99"] == pytest.approx(lat["p99"] / o["p99"], rel=1e-3)
            assert vs[cap]["slo_attainment"] == pytest.approx(
                r["slo_attainment"][cap] / out["oracle"]["slo_attainment"][cap], rel=1e-3)
            assert set(vs[cap]) == {"p50", "p95", "p99", "slowdown_p99", "slo_attainment"}
        assert "cache_hit_ratio" in vs
    # The oracle never loads a model.
    assert out["oracle"]["cold_loads"] == 0 and out["oracle"]["cache_hit_ratio"] == 1
    # Without the oracle in the run there is nothing to divide by.
    assert "vs_oracle" not in report(os.path.join(WL, "seed7.json"), "gpuq")["gpuq"]


def test_shipped_workloads_run_to_the_end(tmp_path):
    for name in ("zoo-nofit.json", "seed003-box.json"):
        wl = json.load(open(os.path.join(WL, name)))
        wl["duration_s"] = 900  # bounded run time
        path = tmp_path / name
        path.write_text(json.dumps(wl))
        out = json.loads(sim(str(path), "all").stdout)
        assert set(out) == ALL
        for pol, r in out.items():
            assert r["unfinished"] == 0, (name, pol)
            assert r["rejected"] == 0, (name, pol)


def test_pinned_field_validated(tmp_path):
    wl = json.load(open(os.path.join(WL, "seed003-box.json")))
    wl["fleet"][0]["pinned"] = ["no-such-model"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(wl))
    p = sim(str(bad), "gpuq", check=False)
    assert p.returncode != 0 and "fleet[0].pinned[0]: unknown model" in p.stderr
    wl["fleet"][0]["pinned"] = "image-v2"
    bad.write_text(json.dumps(wl))
    p = sim(str(bad), "gpuq", check=False)
    assert p.returncode != 0 and "fleet[0].pinned: must be an array" in p.stderr


def test_policy_list_refuses_unknown_and_repeated_names():
    for arg, word in (("gpuq,nope", "unknown"), ("gpuq,gpuq", "repeated")):
        p = sim(MD1, arg, check=False)
        assert p.returncode == 2 and word in p.stderr, p.stderr


def test_pick_worker_fanout_cap(tmp_path):
    """Seed 003's fan-out: a capability capped at 1 GPU runs on one GPU at a
    time while the platform is busy; without the cap it spreads."""
    wl = json.load(open(MM4))
    wl["duration_s"] = 2000
    path = tmp_path / "fan.json"
    path.write_text(json.dumps(wl))
    free = json.loads(sim(str(path), "pick-worker").stdout)["pick-worker"]
    wl["scheduler"]["fanout"] = {"job": 1}
    path.write_text(json.dumps(wl))
    capped = json.loads(sim(str(path), "pick-worker").stdout)["pick-worker"]
    assert free["utilization"] > 0.75  # rho = 0.85 over 4 GPUs
    # One GPU at a time while busy (a few starts spread while quiet).
    assert capped["utilization"] < 0.3, capped["utilization"]
    assert capped["completed"] == free["completed"]
