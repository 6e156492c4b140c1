"""Preemption on a real gpuqd and gpuq-agent (one simulated GPU, the sim
runtime): a long batch job runs on the only GPU; an interactive job arrives
and would wait longer than [scheduler] preempt_after_s — the batch attempt is
stopped (its trace and attempts say "preempted", the head logs a preemption
line naming both jobs), the interactive job runs, and the batch job runs
again to success with its retry budget untouched (max_attempts = 1: a
preemption counted as a failure would dead-letter it)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpuq_harness import SLOW, Client, wait_until  # noqa: E402
from test_agent import Agent  # noqa: E402

BATCH_MS = 6000  # long enough that the interactive job would wait well past the bound

HEAD_CONFIG = """
[workers]
heartbeat_ms = 200
ttl_ms = 5000
[breaker]
failures = 0
[lifecycle]
max_attempts = 1
[model.image-v2]
run_s = 0.5
[scheduler]
preempt_after_s = 0.3
"""


def job(lane, tag, ms):
    return {"capability": "image.fast", "lane": lane, "idempotency_key": tag,
            "params": {"prompt": tag, "width": 1024, "height": 1024, "steps": 30,
                       "sim_ms": ms}}


def test_interactive_job_preempts_a_running_batch_job(head_factory, tmp_path):
    head = head_factory(config_text=HEAD_CONFIG)
    agent = Agent(head, tmp_path, "pre", gpus=1).start()
    try:
        agent.wait_ready()
        c = Client(head.url, head.add_tenant("acme"))
        r = c.post("/v1/jobs", job("batch", "long", BATCH_MS))
        assert r.status == 201, r
        bid = r.json()["id"]
        wait_until(lambda: c.get(f"/v1/jobs/{bid}").json()["state"] == "running", 30 * SLOW,
                   "the batch job to run")
        r = c.post("/v1/jobs", job("interactive", "quick", 200))
        assert r.status == 201, r
        iid = r.json()["id"]

        def finished(i):
            j = c.get(f"/v1/jobs/{i}?wait=5").json()
            return j if j["state"] in ("succeeded", "failed", "dead", "cancelled") else None

        ij = wait_until(lambda: finished(iid), 60 * SLOW, "the interactive job to end")
        assert ij["state"] == "succeeded", ij
        bj = wait_until(lambda: finished(bid), 60 * SLOW, "the batch job to end")
        assert bj["state"] == "succeeded", bj
        # The batch job was stopped for the interactive one, which ran in
        # between; then the batch job ran again, in full, and succeeded.
        att = bj["attempts"]
        assert [a["outcome"] for a in att] == ["preempted", "ok"], att
        assert att[0]["error_class"] is None
        assert f"interactive job {iid}" in att[0]["error"], att[0]
        assert att[0]["ended_ms"] - att[0]["started_ms"] < BATCH_MS, att[0]
        assert att[0]["ended_ms"] <= ij["started_ms"] + 1000 * SLOW
        assert ij["finished_ms"] <= att[1]["started_ms"], (ij, att)
        # Its retry budget (max_attempts = 1) is intact: a counted failure would
        # have dead-lettered it.
        assert bj["error"] is None
        steps = c.get(f"/v1/jobs/{bid}/trace").json()["steps"]
        pre = [s for s in steps if s.get("outcome") == "preempted"]
        assert pre and pre[0]["step"] == "retry", steps
        lines = [json.loads(ln) for ln in head.tail(200000).splitlines()
                 if '"event":"preemption"' in ln]
        assert lines, head.tail()
        assert lines[0]["job"] == str(bid) and lines[0]["for_job"] == str(iid), lines[0]
        assert "would wait" in lines[0]["reason"]
    finally:
        agent.stop()


def test_no_preemption_when_off(head_factory, tmp_path):
    head = head_factory(config_text=HEAD_CONFIG.replace("preempt_after_s = 0.3",
                                                        "preempt_after_s = 0"))
    agent = Agent(head, tmp_path, "nopre", gpus=1).start()
    try:
        agent.wait_ready()
        c = Client(head.url, head.add_tenant("acme"))
        bid = c.post("/v1/jobs", job("batch", "long", 1500)).json()["id"]
        wait_until(lambda: c.get(f"/v1/jobs/{bid}").json()["state"] == "running", 30 * SLOW,
                   "the batch job to run")
        iid = c.post("/v1/jobs", job("interactive", "quick", 100)).json()["id"]
        ij = wait_until(lambda: (lambda j: j if j["state"] == "succeeded" else None)(
            c.get(f"/v1/jobs/{iid}?wait=5").json()), 60 * SLOW, "the interactive job")
        bj = c.get(f"/v1/jobs/{bid}").json()
        assert bj["state"] == "succeeded", bj
        assert [a["outcome"] for a in bj["attempts"]] == ["ok"], bj["attempts"]
        assert bj["finished_ms"] <= ij["started_ms"] + 50
    finally:
        agent.stop()


def test_preemption_reaches_a_worker_between_slow_heartbeats(head_factory, tmp_path):
    """A preempted attempt's stop reaches its worker on a heartbeat. With
    heartbeat_ms at 60 s, the head's register answer tells the agent to beat
    at the preemption bound while a worker holds work, so the interactive job
    still gets the GPU long before the batch job would have ended."""
    long_ms = 40000
    head = head_factory(config_text=HEAD_CONFIG.replace(
        "heartbeat_ms = 200\nttl_ms = 5000", "heartbeat_ms = 60000\nttl_ms = 180000"))
    agent = Agent(head, tmp_path, "slowbeat", gpus=1).start()
    try:
        agent.wait_ready()
        c = Client(head.url, head.add_tenant("acme"))
        bid = c.post("/v1/jobs", job("batch", "long", long_ms)).json()["id"]
        bj = wait_until(lambda: (lambda j: j if j["state"] == "running" else None)(
            c.get(f"/v1/jobs/{bid}").json()), 30 * SLOW, "the batch job to run")
        iid = c.post("/v1/jobs", job("interactive", "quick", 100)).json()["id"]
        ij = wait_until(lambda: (lambda j: j if j["state"] in ("succeeded", "failed", "dead")
                                 else None)(c.get(f"/v1/jobs/{iid}?wait=5").json()),
                        60 * SLOW, "the interactive job to end")
        assert ij["state"] == "succeeded", ij
        att = c.get(f"/v1/jobs/{bid}").json()["attempts"]
        assert att[0]["outcome"] == "preempted", att
        # The GPU changed hands long before the batch job would have ended
        # (without the busy beat: 60 s on, after the batch job's 40 s).
        assert ij["started_ms"] < att[0]["started_ms"] + long_ms / 2, (ij, att)
        assert c.delete(f"/v1/jobs/{bid}").status == 200
    finally:
        agent.stop()
