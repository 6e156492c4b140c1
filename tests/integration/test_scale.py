"""The autoscaling advisor in a real gpuqd: a burst of work with no GPU makes
the head run its scale-up hook, which starts a real gpuq-agent with simulated
GPUs; the new GPUs take the work, their cold start (provision request → first
ready heartbeat) is recorded; once they sit idle the head runs the scale-down
hook naming them, which stops the agent, and the agent drains and leaves.
Settings are small (cold start prior 1 s, idle release 3 s) so the test stays
short; every wait ends on an observed state."""

import json
import os
import sys
import textwrap

from gpuq_harness import SLOW, binary, wait_until

CLASS = "Simulated GeForce RTX 5090"  # the name simulated GPUs report

HOOK = textwrap.dedent("""\
    import json, os, signal, subprocess, sys
    d = sys.argv[1]
    env = {{k: v for k, v in os.environ.items() if k.startswith("GPUQ_")}}
    with open(os.path.join(d, "calls.jsonl"), "a") as f:
        f.write(json.dumps(env) + "\\n")
    action = os.environ["GPUQ_SCALE_ACTION"]
    if action == "up":
        with open(os.path.join(d, "token")) as f:
            token = f.read().strip()
        log = open(os.path.join(d, "agent.log"), "ab")
        p = subprocess.Popen([{agent!r}, "--head", os.environ["GPUQ_HEAD_URL"],
                              "--worker-token", token, "--config", os.path.join(d, "agent.conf"),
                              "--sim-gpus", os.environ["GPUQ_SCALE_COUNT"]],
                             stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        with open(os.path.join(d, "agent.pid"), "w") as f:
            f.write(str(p.pid))
        print("started agent", p.pid, "with", os.environ["GPUQ_SCALE_COUNT"], "GPUs")
    else:
        with open(os.path.join(d, "agent.pid")) as f:
            pid = int(f.read())
        try:
            os.kill(pid, signal.SIGTERM)
            print("stopped agent", pid, "for", os.environ["GPUQ_SCALE_WORKERS"])
        except ProcessLookupError:
            print("agent", pid, "already gone")
""")


def head_config(d, dry_run=False):
    hook = f"{sys.executable} {d}/hook.py {d}"
    return f"""
[workers]
heartbeat_ms = 200
ttl_ms = 5000
[jobs]
allow_unserved = true
[scale]
enabled = true
dry_run = {"true" if dry_run else "false"}
k_batch = 2
target_utilization = 0.8
down_utilization = 0.5
max_gpus = 2
idle_release_s = 3
cooldown_s = 2
cold_start_prior_s = 1
interval_ms = 200
hook_timeout_s = 20
class = {CLASS}
scale_up_cmd = {hook}
scale_down_cmd = {hook}
"""


def setup_dir(tmp_path):
    d = str(tmp_path / "scale")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "hook.py"), "w") as f:
        f.write(HOOK.format(agent=binary("gpuq-agent")))
    with open(os.path.join(d, "agent.conf"), "w") as f:
        f.write(f"""[agent]
runtime = {binary('gpuq-sim-runtime')} --scale 0.001
host = scaled
nvml = false
work_dir = {d}/work
ping_interval_ms = 200
poll_wait_s = 2
telemetry_ms = 100
""")
    return d


def calls(d):
    try:
        with open(os.path.join(d, "calls.jsonl")) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def scale_view(head):
    r = head.admin().get("/v1/scale")
    assert r.status == 200, r
    return r.json()


def burst(head, n=10):
    c = head.client(head.add_tenant("acme"))
    ids = []
    for i in range(n):
        r = c.post("/v1/jobs", {"capability": "image.fast", "params": {"prompt": f"p{i}"}})
        assert r.status == 201, r
        ids.append(r.json()["id"])
    return c, ids


def test_scale_up_hook_starts_an_agent_that_takes_work_and_is_released_when_idle(
        head_factory, tmp_path):
    d = setup_dir(tmp_path)
    head = head_factory(config_text=head_config(d))
    with open(os.path.join(d, "token"), "w") as f:
        f.write(head.add_worker_token("scaled"))
    # Nothing queued, no GPU: the advisor holds.
    wait_until(lambda: scale_view(head)["recommendation"], 10 * SLOW, "a first decision")
    v = scale_view(head)
    assert v["enabled"] is True and v["class"] == CLASS
    assert v["recommendation"]["action"] == "hold"
    assert calls(d) == []

    c, ids = burst(head)

    # The burst is worth GPUs: the up hook runs once, for the maximum (2), with its class.
    wait_until(lambda: calls(d), 20 * SLOW, "the scale-up hook to be called")
    up = calls(d)[0]
    assert up["GPUQ_SCALE_ACTION"] == "up"
    assert up["GPUQ_SCALE_CLASS"] == CLASS
    assert up["GPUQ_SCALE_COUNT"] == "2"
    # The jobs are interactive: their lane drove it, judged by k_interactive (0.25).
    assert "for interactive" in up["GPUQ_SCALE_REASON"]
    assert "k_interactive 0.25 x cold start 1 s" in up["GPUQ_SCALE_REASON"]

    # The new agent's GPUs take the work.
    def all_done():
        for jid in ids:
            j = c.get(f"/v1/jobs/{jid}").json()
            if j["state"] != "succeeded":
                assert j["state"] in ("queued", "running"), j
                return False
        return True

    wait_until(all_done, 60 * SLOW, "the burst to succeed on the new GPUs")
    workers_used = {c.get(f"/v1/jobs/{jid}").json().get("worker_id") for jid in ids}
    assert workers_used and all(w and w.startswith("scaled-") for w in workers_used), workers_used

    # Its cold start was learned from provision request → first ready heartbeat.
    v = scale_view(head)
    learned = [x for x in v["cold_starts"] if x["class"] == CLASS]
    assert learned and learned[0]["learned"] is True and learned[0]["samples"] == 2, v
    assert 0 < learned[0]["cold_start_s"] < 30, learned
    assert v["actions"]["up"] == 1

    # Idle past idle_release_s: the down hook names the idle workers (both, or the first to
    # pass the idle time); the hook stops the agent, which drains and leaves.
    try:
        wait_until(lambda: len(calls(d)) >= 2, 30 * SLOW, "the scale-down hook to be called")
    except AssertionError:
        raise AssertionError(json.dumps(scale_view(head)["recommendation"]))
    down = calls(d)[1]
    assert down["GPUQ_SCALE_ACTION"] == "down"
    named = down["GPUQ_SCALE_WORKERS"].split()
    assert named and set(named) <= {"scaled-gpu0", "scaled-gpu1"}, down
    assert down["GPUQ_SCALE_COUNT"] == str(len(named))
    assert f"release {len(named)} GPU(s) idle over 3 s" in down["GPUQ_SCALE_REASON"]
    with open(os.path.join(d, "agent.pid")) as f:
        pid = int(f.read())

    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"

    wait_until(gone, 30 * SLOW, "the released agent to exit")
    wait_until(lambda: not head.admin().get("/v1/workers").json()["workers"], 30 * SLOW,
               "the released workers to leave the registry")
    v = scale_view(head)
    hooks = v["hooks"]  # newest first
    assert hooks[-1]["action"] == "up" and "started agent" in hooks[-1]["output"], hooks
    assert all(h["action"] == "down" for h in hooks[:-1]), hooks
    assert all(h["exit_code"] == 0 and not h["running"] for h in hooks), hooks
    with open(os.path.join(d, "agent.log"), "rb") as f:
        assert b"drained" in f.read()
    log = head.tail(20000)
    assert "up hook (class %s, count 2) exited 0" % CLASS in log
    assert "ready" in log and "after its provision request" in log
    # No flapping: one scale-up, and releases only (at most one per worker).
    assert [x["GPUQ_SCALE_ACTION"] for x in calls(d)].count("up") == 1
    assert v["actions"]["up"] == 1 and 1 <= v["actions"]["down"] <= 2, v["actions"]


def test_scale_dry_run_only_logs(head_factory, tmp_path):
    d = setup_dir(tmp_path)
    head = head_factory(config_text=head_config(d, dry_run=True))
    burst(head, n=4)

    def logged():
        return "dry run, not acted on: up" in head.tail(20000)

    wait_until(logged, 20 * SLOW, "the dry-run decision in the log")
    v = scale_view(head)
    assert v["dry_run"] is True
    assert v["actions"]["up"] >= 1
    assert v["hooks"] == []
    assert calls(d) == []


def test_scale_view_needs_admin_and_cli_shows_it(head_factory, tmp_path):
    import subprocess
    d = setup_dir(tmp_path)
    head = head_factory(config_text=head_config(d, dry_run=True))
    tenant = head.add_tenant("t")
    assert head.client(tenant).get("/v1/scale").status == 403
    wait_until(lambda: scale_view(head)["recommendation"], 10 * SLOW, "a first decision")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUQ_")}
    env.update(GPUQ_URL=head.url, GPUQ_KEY=head.admin_key, HOME=head.data_dir)
    out = subprocess.run([binary("gpuq"), "scale"], env=env, capture_output=True, text=True,
                         timeout=30 * SLOW)
    assert out.returncode == 0, out.stderr
    assert "autoscaling advisor: on (dry run" in out.stdout
    assert "recommendation: hold" in out.stdout
