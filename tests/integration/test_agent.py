"""gpuq-agent end to end: a real gpuqd, a real gpuq-agent with simulated GPUs
(or the fake NVML) and the real gpuq-sim-runtime, all on 127.0.0.1 in temp
dirs. Sim times are scaled down so that the whole file stays short; every wait
is bounded and ends on an observed condition."""

import http.client
import http.server
import json
import os
import re
import signal
import socket
import struct
import threading
import time
import urllib.parse
import zlib

import pytest

from gpuq_harness import BUILD, SLOW, binary, pids_with_env, spawn, stop_proc, wait_until

HEAD_CONFIG = """
[workers]
heartbeat_ms = 200
ttl_ms = 5000
[jobs]
max_attempts = 3
[breaker]
failures = 0
"""
# failures = 0: these tests inject GPU faults on purpose and want every worker
# back at once; quarantine is tested in test_head.py.

FAKE_NVML = os.path.join(BUILD, "tests", "fakes", "libnvidia-ml.so.1")


# --- helpers -----------------------------------------------------------------

def png_ok(data):
    """True when data is a complete, CRC-clean PNG whose pixels decompress to
    exactly the size its header promises."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return False
    pos, idat, ihdr, ended = 8, b"", None, False
    while pos + 12 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        crc = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
        if len(body) != n or zlib.crc32(kind + body) != crc:
            return False
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            ended = True
            break
        pos += 12 + n
    if not ihdr or not ended:
        return False
    w, h, depth, color = ihdr[:4]
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    return len(zlib.decompress(idat)) == h * (1 + w * channels * depth // 8)


class Agent:
    """A gpuq-agent against a head, with its config and log in tmp."""

    def __init__(self, head, tmp, host, gpus=4, extra="", env=None, nvml=False, runtime=None,
                 head_url=None):
        self.head, self.host = head, host
        self.head_url = head_url or head.url
        self.dir = os.path.join(str(tmp), host)
        os.makedirs(self.dir, exist_ok=True)
        self.fault_file = os.path.join(self.dir, "fault")
        self.log_path = os.path.join(self.dir, "agent.log")
        self.config = os.path.join(self.dir, "agent.conf")
        nvml_line = f"nvml_library = {FAKE_NVML}" if nvml else "nvml = false"
        with open(self.config, "w") as f:
            f.write(f"""[agent]
runtime = {runtime or binary('gpuq-sim-runtime') + ' --scale 0.001 --fault-file ' + self.fault_file}
host = {host}
{nvml_line}
work_dir = {self.dir}/work
ping_interval_ms = 200
ping_timeout_ms = {int(1500 * SLOW)}
poll_wait_s = 2
telemetry_ms = 100
restart_min_ms = 50
restart_max_ms = 1000
{extra}
""")
        self.token = head.add_worker_token(host)
        self.gpus, self.env, self.nvml = gpus, env, nvml
        self.proc = None

    def start(self):
        args = [binary("gpuq-agent"), "--head", self.head_url, "--worker-token", self.token,
                "--config", self.config]
        if not self.nvml:
            args += ["--sim-gpus", str(self.gpus)]
        self.proc = spawn(args, self.log_path, env=self.env)
        return self

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def worker_ids(self):
        return [f"{self.host}-gpu{i}" for i in range(self.gpus)]

    def wait_ready(self, n=None):
        n = self.gpus if n is None else n

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited {self.proc.returncode}: {self.log()[-3000:]}")
            ws = [w for w in workers(self.head) if w["id"].startswith(self.host + "-")]
            return len([w for w in ws if w["state"] == "ready"]) >= n and ws

        return wait_until(ready, 20, f"{n} workers of {self.host} ready")

    def stop(self):
        return stop_proc(self.proc)


def workers(head):
    r = head.admin().get("/v1/workers")
    assert r.status == 200, r
    return r.json()["workers"]


def submit(client, body, timeout_s=30):
    """Submits a job, honouring 429 Retry-After (bounded)."""
    deadline = time.monotonic() + timeout_s * SLOW
    while True:
        r = client.post("/v1/jobs", body)
        if r.status == 201:
            return r.json()
        assert r.status == 429 and time.monotonic() < deadline, r
        time.sleep(min(float(r.header("Retry-After") or 1), 1.0))


def wait_job(client, job_id, timeout_s,
             until=("succeeded", "failed", "cancelled", "dead", "expired")):
    # A long-poll answers on the job's next change, so it would never show a
    # state the job is already in: a predicate on a passing state (running on
    # some worker) reads the job as it is now; a terminal state, which stays,
    # can be long-polled.
    path = f"/v1/jobs/{job_id}" + ("?wait=5" if isinstance(until, tuple) else "")

    def done():
        r = client.get(path)
        assert r.status == 200, r
        j = r.json()
        return j if (j["state"] in until if isinstance(until, tuple) else until(j)) else None

    return wait_until(done, timeout_s, f"job {job_id} to reach {until}")


def runtime_pids(worker_id):
    """PIDs of this test run's sim runtimes for worker_id."""
    return pids_with_env(f"GPUQ_WORKER_ID={worker_id}".encode(), exact=True)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def cluster(head_factory, tmp_path):
    """A head plus an agent factory; agents are stopped after the test."""
    head = head_factory(config_text=HEAD_CONFIG)
    agents = []

    def make_agent(host, **kw):
        a = Agent(head, tmp_path, host, **kw).start()
        agents.append(a)
        return a

    yield head, make_agent
    for a in agents:
        a.stop()


# --- tests -------------------------------------------------------------------

def test_agent_200_mixed_jobs_all_valid_png(cluster):
    head, make_agent = cluster
    agent = make_agent("mix")
    agent.wait_ready()
    c = head.client(head.add_tenant("mix"))
    kinds = [("image.fast", "image-v2"), ("upscale", "upscale"), ("bg-remove", "bg-remove")]
    ids = []
    for i in range(200):
        cap, model = kinds[i % 7 % 3]
        size = [256, 512, 768, 1024][i % 4]
        job = submit(c, {"capability": cap, "model": model,
                         "params": {"prompt": f"a fox {i}", "width": size, "height": size,
                                    "steps": 1 + i % 30, "seed": i}})
        ids.append(job["id"])
    for jid in ids:
        j = wait_job(c, jid, 60)
        assert j["state"] == "succeeded", j
        # "succeeded" shows only once the result is durable: it downloads at once.
        r = c.get(f"/v1/jobs/{jid}/result")
        assert r.status == 200, r
        assert r.header("Content-Type") == "image/png", r
        assert png_ok(r.body), f"job {jid}: result is not a valid PNG"
    # Work was spread over the GPUs, and the utility models were cache hits after their loads.
    used = {c.get(f"/v1/jobs/{jid}").json()["worker_id"] for jid in ids}
    assert len(used) >= 2, used
    # Cache counters reach the head with heartbeats, a moment after the jobs end.
    def hits():
        ws = [w for w in workers(head) if w["id"].startswith("mix-")]
        n = sum(w["cache"]["hits"] for w in ws)
        return n if n > 150 else None
    wait_until(hits, 10, "over 150 model-cache hits reported by heartbeats")


def agent_polls(head):
    """(polls, workers they named, polls that named one) from the head's /metrics."""
    text = head.admin().get("/metrics").body.decode()

    def val(pattern):
        m = re.search(pattern, text, re.M)
        return int(float(m.group(1))) if m else 0

    return (val(r"^gpuq_agent_poll_workers_count (\S+)$"),
            val(r"^gpuq_agent_poll_workers_sum (\S+)$"),
            val(r'^gpuq_agent_poll_workers_bucket\{le="1"\} (\S+)$'))


def test_agent_workers_freed_together_ask_for_work_in_one_poll(cluster):
    head, make_agent = cluster
    agent = make_agent("group", gpus=4)
    agent.wait_ready()
    c = head.client(head.add_tenant("group"))
    polls0, named0, single0 = agent_polls(head)
    # A backlog (one batch of jobs): each GPU takes its next job as soon as its
    # result is in.
    r = c.post("/v1/batches", {"jobs": [
        {"capability": "image.fast",
         "params": {"prompt": f"g{i}", "width": 64, "height": 64, "sim_ms": 0}}
        for i in range(200)]})
    assert r.status == 201, r
    ids = [j["id"] for j in r.json()["jobs"]]
    # Each assignment reached the worker the head gave it to: a report from
    # any other would be fenced off and the job run again.
    for jid in ids:
        j = wait_job(c, jid, 60)
        assert j["state"] == "succeeded" and j["attempt"] == 1, j
    assert len({c.get(f"/v1/jobs/{jid}").json()["worker_id"] for jid in ids}) >= 2
    polls, named, single = (x - x0 for x, x0 in zip(agent_polls(head), (polls0, named0, single0)))
    # Workers whose results left in one batch asked for their next jobs in
    # one poll: fewer polls than jobs, and some named several GPUs.
    assert 0 < polls < len(ids), (polls, named, single)
    assert single < polls and named > polls, (polls, named, single)


def policies(pids):
    """The scheduling policies of every thread of pids (one that ends meanwhile
    is skipped)."""
    out = set()
    for p in pids:
        for t in os.listdir(f"/proc/{p}/task"):
            try:
                out.add(os.sched_getscheduler(int(t)))
            except ProcessLookupError:
                continue
    return out


def test_agent_threads_run_under_sched_batch_and_runtimes_under_the_normal_policy(cluster):
    """sched_batch = true puts every agent thread under SCHED_BATCH, and the
    runtimes it starts under the normal policy; by default every thread keeps
    the policy the agent was started with (docs/agent-config.md)."""
    head, make_agent = cluster
    on, off = make_agent("batch", gpus=2, extra="sched_batch = true"), make_agent("normal", gpus=2)
    for a in (on, off):
        a.wait_ready()
    c = head.client(head.add_tenant("batch"))
    for i in range(4):
        job = submit(c, {"capability": "image.fast", "params": {"prompt": f"b{i}", "sim_ms": 0}})
        assert wait_job(c, job["id"], 30)["state"] == "succeeded"
    for a, policy in ((on, os.SCHED_BATCH), (off, os.sched_getscheduler(0))):
        # main, monitor, outbox and a controller and poller per GPU
        assert len(os.listdir(f"/proc/{a.proc.pid}/task")) >= 3 + 2 * a.gpus
        assert policies([a.proc.pid]) == {policy}, a.host
        runtimes = [p for w in a.worker_ids() for p in runtime_pids(w)]
        assert len(runtimes) == a.gpus, (a.host, runtimes)
        assert policies(runtimes) == {os.SCHED_OTHER}, a.host


def test_agent_second_job_for_warm_model_goes_to_the_gpu_that_holds_it(cluster):
    head, make_agent = cluster
    agent = make_agent("warm")
    agent.wait_ready()
    c = head.client(head.add_tenant("warm"))
    first = wait_job(c, submit(c, {"capability": "upscale", "params": {"prompt": "x"}})["id"], 20)
    assert first["state"] == "succeeded", first
    holder = first["worker_id"]

    def head_knows():
        return any(w["id"] == holder and any(m["name"] == "upscale" for m in w["loaded_models"])
                   for w in workers(head))

    wait_until(head_knows, 10, "the head to see upscale resident on " + holder)
    second = wait_job(c, submit(c, {"capability": "upscale", "params": {"prompt": "y"}})["id"], 20)
    assert second["state"] == "succeeded", second
    assert second["worker_id"] == holder, (first, second)
    wait_until(lambda: any(w["id"] == holder and w["cache"]["hits"] >= 1 for w in workers(head)),
               10, "a cache hit counted on " + holder)


def test_agent_drain_under_load_loses_nothing(cluster):
    head, make_agent = cluster
    agent = make_agent("drain")
    agent.wait_ready()
    c = head.client(head.add_tenant("drain"))
    ids = [submit(c, {"capability": "image.fast",
                      "params": {"prompt": f"d{i}", "width": 256, "height": 256,
                                 "sim_ms": 150}})["id"] for i in range(40)]
    wait_until(lambda: sum(c.get(f"/v1/jobs/{i}").json()["state"] == "succeeded"
                           for i in ids) >= 4, 20, "some jobs to finish")

    # The head's drain of one worker: it finishes what it holds and deregisters.
    r = head.admin().post(f"/v1/workers/{agent.host}-gpu0/drain", {})
    assert r.status == 200, r
    wait_until(lambda: not any(w["id"] == f"{agent.host}-gpu0" and w["state"] != "draining"
                               for w in workers(head)) and "drain-gpu0: drained" in agent.log(),
               15, "gpu0 to drain and deregister")

    # SIGTERM: every worker drains; the agent exits 0 once its jobs are done.
    agent.proc.send_signal(signal.SIGTERM)
    agent.proc.wait(timeout=20 * SLOW)
    assert agent.proc.returncode == 0, agent.log()[-3000:]
    assert "all workers drained" in agent.log()

    # A new agent (a deploy) takes the rest; nothing failed, nothing ran twice.
    make_agent("drain2").wait_ready()
    for jid in ids:
        j = wait_job(c, jid, 60)
        assert j["state"] == "succeeded", j
        assert j["attempt"] == 1, j


def test_agent_killed_runtime_is_restarted_and_job_succeeds_on_retry(cluster):
    head, make_agent = cluster
    agent = make_agent("kill")
    agent.wait_ready()
    c = head.client(head.add_tenant("kill"))
    jid = submit(c, {"capability": "image.fast", "params": {"prompt": "k", "sim_ms": 3000}})["id"]
    # Phase "generating" is posted only once the runtime reports progress on the
    # job: killing the runtime earlier (phase "assigned") would kill it before
    # the job reached it, and the same attempt would then run on the new runtime.
    running = wait_job(c, jid, 20, until=lambda j: j["state"] == "running" and j["worker_id"]
                       and j.get("phase") == "generating")
    wid = running["worker_id"]
    pids = wait_until(lambda: runtime_pids(wid), 10, "the runtime of " + wid)
    os.kill(pids[0], signal.SIGKILL)

    j = wait_job(c, jid, 30)
    assert j["state"] == "succeeded", j
    assert j["attempt"] == 2 and j["worker_id"] != wid, j
    # The killed runtime came back (a new process) and its worker is ready again.
    wait_until(lambda: [p for p in runtime_pids(wid) if p != pids[0]], 10, "a new runtime")
    wait_until(lambda: any(w["id"] == wid and w["state"] == "ready" for w in workers(head)), 10,
               wid + " ready again")
    assert "runtime pid %d lost (crash" % pids[0] in agent.log()


def test_agent_hung_runtime_is_killed_within_ping_timeout(cluster):
    head, make_agent = cluster
    agent = make_agent("hang", gpus=2)
    agent.wait_ready()
    c = head.client(head.add_tenant("hang"))
    jid = submit(c, {"capability": "image.fast",
                     "params": {"prompt": "h", "fault": "hang", "sim_ms": 50}})["id"]
    running = wait_job(c, jid, 20, until=lambda j: j["state"] == "running" and j["worker_id"])
    wid = running["worker_id"]
    pid = wait_until(lambda: runtime_pids(wid), 10, "the runtime of " + wid)[0]
    # Hung from the moment it got the job; ping_timeout_ms is 1.5 s (× SLOW).
    wait_until(lambda: "simulated hang" in agent.log(), 10, "the runtime to hang")
    t0 = time.monotonic()
    wait_until(lambda: not alive(pid), 4, "the hung runtime to be killed")
    assert time.monotonic() - t0 <= 3.5 * SLOW
    j = wait_job(c, jid, 40)
    assert j["state"] == "dead" and j["error"]["class"] == "hang", j
    assert "no answer to ping within" in agent.log()


def test_agent_fake_nvml_values_reach_the_head(cluster):
    head, make_agent = cluster
    env = {"FAKE_NVML_GPUS": "2", "FAKE_NVML_NAME": "Fake RTX 5090", "FAKE_NVML_TEMP": "57",
           "FAKE_NVML_MEM_MB": "24576", "FAKE_NVML_USED_MB": "1234", "FAKE_NVML_UTIL": "42",
           "FAKE_NVML_POWER_MW": "123456", "FAKE_NVML_CLOCK": "1965",
           "FAKE_NVML_THROTTLE": "0x20"}
    agent = make_agent("nvml", gpus=2, nvml=True, env=env,
                       extra="[gpu.0]\npinned = upscale\n[gpu.1]\npinned = upscale\n")
    ws = agent.wait_ready()

    def telemetry_in():
        got = [w for w in workers(head) if w["id"].startswith("nvml-")]
        return got if all(w.get("telemetry") and w["telemetry"].get("temp_c") for w in got) \
            and len(got) == 2 else None

    ws = sorted(wait_until(telemetry_in, 10, "telemetry from the fake NVML"),
                key=lambda w: w["id"])
    for i, w in enumerate(ws):
        assert w["gpu"]["name"] == "Fake RTX 5090"
        assert w["gpu"]["uuid"] == f"GPU-fake-{i:04d}"
        assert w["gpu"]["vram_total_mb"] == 24576
        t = w["telemetry"]
        assert t["temp_c"] == 57 + i, t
        assert t["vram_total_mb"] == 24576 and t["vram_used_mb"] == 1234, t
        assert t["util_pct"] == 42 and t["sm_clock_mhz"] == 1965, t
        assert abs(t["power_w"] - 123.5) < 0.11, t
        assert t["throttle_reasons"] == ["sw_thermal"] and t["health"] == "ok", t
    assert "NVML: 2 GPU(s) through " + FAKE_NVML in agent.log()


def test_agent_bad_runtime_output_is_survived_and_reported(cluster):
    head, make_agent = cluster
    agent = make_agent("garbage", gpus=1)
    agent.wait_ready()
    c = head.client(head.add_tenant("garbage"))
    with open(agent.fault_file, "w") as f:  # one-shot: the next job's runtime takes it
        f.write("garbage\n")
    j = wait_job(c, submit(c, {"capability": "image.fast", "params": {"prompt": "g"}})["id"], 20)
    assert j["state"] == "succeeded", j
    assert png_ok(c.get(f"/v1/jobs/{j['id']}/result").body)
    log = agent.log()
    assert log.count("bad runtime line") >= 8, log[-4000:]
    for why in ("not JSON", "line longer than max_line_bytes", "unknown or idle job id",
                "unknown message type", "progress: must be a number"):
        assert why in log, why
    assert "/etc/passwd" not in c.get(f"/v1/jobs/{j['id']}/result").body.decode(errors="replace")
    # The same runtime keeps serving.
    j2 = wait_job(c, submit(c, {"capability": "image.fast", "params": {"prompt": "g2"}})["id"], 20)
    assert j2["state"] == "succeeded", j2


def test_agent_runtime_faults_are_reported_with_their_class(cluster):
    head, make_agent = cluster
    agent = make_agent("faults", gpus=3)
    agent.wait_ready()
    c = head.client(head.add_tenant("faults"))
    want = {"oom": "oom", "cuda": "cuda", "crash": "crash", "bad_input": "bad_input",
            "solid": "qc"}
    ids = {f: submit(c, {"capability": "image.fast",
                         "params": {"prompt": f, "fault": f, "sim_ms": 20}})["id"] for f in want}
    for fault, jid in ids.items():
        j = wait_job(c, jid, 40)
        # Retried to the budget (dead-lettered), except bad_input (failed at once).
        assert j["state"] == ("failed" if fault == "bad_input" else "dead"), j
        assert j["error"]["class"] == want[fault], j
        assert j["attempt"] == (1 if fault == "bad_input" else 3), j
    # After all that, every worker is back and serving.
    agent.wait_ready()
    j = wait_job(c, submit(c, {"capability": "image.fast", "params": {"prompt": "ok"}})["id"], 30)
    assert j["state"] == "succeeded", j


def test_agent_same_params_give_the_same_picture_and_other_params_or_a_fault_another(cluster):
    """The sim runtime sends its last picture again for the same arguments
    instead of drawing it anew: the bytes must be those a fresh drawing gives,
    and a new seed or the solid-colour fault must never get the kept one."""
    head, make_agent = cluster
    agent = make_agent("pic", gpus=1)  # one runtime: every job below meets the last one's picture
    agent.wait_ready()
    c = head.client(head.add_tenant("pic"))

    def run(seed, **extra):
        params = {"prompt": "a kept fox", "width": 512, "height": 512, "seed": seed, **extra}
        return wait_job(c, submit(c, {"capability": "image.fast", "params": params})["id"], 40)

    def picture(seed):
        j = run(seed)
        assert j["state"] == "succeeded", j
        r = c.get(f"/v1/jobs/{j['id']}/result")
        assert r.status == 200 and png_ok(r.body), r
        return r.body

    a = picture(1)
    assert picture(1) == a  # the kept picture: the same bytes as the drawing
    b = picture(2)
    assert b != a
    assert picture(1) == a  # drawn again
    j = run(1, fault="solid", sim_ms=5)  # same arguments as a, but one colour: QC refuses it
    assert j["state"] == "dead" and j["error"]["class"] == "qc", j
    assert picture(1) == a
    assert picture(2) == b


def test_agent_worker_whose_pinned_model_fails_warm_up_is_not_ready(cluster):
    """R25: a worker announces itself ready only after its pinned models ran a
    synthetic job. gpuq-cuda-runtime without a driver fails every load, so the
    worker stays 'warming' while the agent restarts the runtime and retries."""
    head, make_agent = cluster
    env = dict(os.environ, GPUQ_CUDA_LIBRARY=os.path.join(BUILD, "no-such-libcuda.so.1"))
    agent = make_agent("nocuda", gpus=1, env=env, runtime=binary("gpuq-cuda-runtime"),
                       extra="[model.upscale]\nvram_mb = 100\ncapabilities = upscale\n[gpu.0]\npinned = upscale\n")
    wait_until(lambda: agent.log().count("failed its warm-up") >= 2, 20,
               "two warm-up failures, the runtime restarted between them")
    assert "CUDA unavailable" in agent.log()
    ws = [w for w in workers(head) if w["id"] == "nocuda-gpu0"]
    assert ws and ws[0]["state"] == "warming", ws


def test_agent_restarted_runtime_warms_pinned_model_before_ready_again(cluster):
    """A runtime that dies takes its resident models with it: the worker goes
    back to warming and is ready again only after its pinned model ran a
    warm-up job on the new runtime."""
    head, make_agent = cluster
    agent = make_agent("rewarm", gpus=1, extra="[gpu.0]\npinned = upscale\n")
    agent.wait_ready()
    assert agent.log().count("warm-up done, ready") == 1
    pids = wait_until(lambda: runtime_pids("rewarm-gpu0"), 10, "the runtime of rewarm-gpu0")
    os.kill(pids[0], signal.SIGKILL)
    wait_until(lambda: agent.log().count("warm-up done, ready") == 2, 20,
               "a second warm-up on the restarted runtime")
    log = agent.log()
    assert log.index("runtime pid %d lost" % pids[0]) < log.rindex("warm-up of upscale done")
    wait_until(lambda: any(w["id"] == "rewarm-gpu0" and w["state"] == "ready"
                           and "upscale" in json.dumps(w) for w in workers(head)), 10,
               "rewarm-gpu0 ready with upscale loaded")


# --- the outbox, runtime floods and exits, cancel (issue 14) ------------------

class Proxy:
    """A TCP proxy on 127.0.0.1 in front of the head, for cutting the
    agent→head link: close() refuses new connections and resets open ones;
    open() listens again on the same port."""

    def __init__(self, target_url):
        u = urllib.parse.urlparse(target_url)
        self.target = (u.hostname, u.port)
        self.port = 0
        self.lock = threading.Lock()
        self.conns = []
        self.listener = None
        self.open()
        self.url = f"http://127.0.0.1:{self.port}"

    def open(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        self.port = s.getsockname()[1]
        self.listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, listener):
        while True:
            try:
                c, _ = listener.accept()
            except OSError:
                return
            if self.listener is not listener:  # closed meanwhile
                c.close()
                return
            try:
                u = socket.create_connection(self.target, timeout=5)
            except OSError:
                c.close()
                continue
            with self.lock:
                if self.listener is not listener:
                    c.close()
                    u.close()
                    return
                self.conns += [c, u]
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._forward(src, dst, data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _forward(self, src, dst, data):
        """Passes one read on; a subclass may hold or look at it first."""
        dst.sendall(data)

    def close(self):
        listener, self.listener = self.listener, None
        # shutdown wakes the thread blocked in accept(); close alone would not.
        try:
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        listener.close()
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:  # shutdown wakes the pumps blocked in recv(); then reset
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def test_agent_results_made_while_head_unreachable_are_delivered_when_it_is_back(
        head_factory, tmp_path):
    """The agent→head link is cut while a job runs: its result waits in the
    outbox (retried with backoff, never dropped) and is delivered once the link
    is back; the attempt is not re-run and the runtime is not touched."""
    head = head_factory(config_text=HEAD_CONFIG)
    proxy = Proxy(head.url)
    link = type("ViaProxy", (), {})()
    link.url, link.add_worker_token = proxy.url, head.add_worker_token
    agent = Agent(link, tmp_path, "cut", gpus=1).start()
    try:
        wait_until(lambda: any(w["id"] == "cut-gpu0" and w["state"] == "ready"
                               for w in workers(head)), 20, "cut-gpu0 ready")
        c = head.client(head.add_tenant("cut"))
        jid = submit(c, {"capability": "image.fast",
                         "params": {"prompt": "c", "sim_ms": 1200}})["id"]
        wait_job(c, jid, 20, until=lambda j: j["state"] == "running"
                 and j.get("phase") == "generating")
        proxy.close()
        wait_until(lambda: f"complete of job {jid} attempt 1 not delivered" in agent.log(), 10,
                   "the completion to fail for want of a head")
        assert c.get(f"/v1/jobs/{jid}").json()["state"] == "running"
        proxy.open()
        j = wait_job(c, jid, 15)
        assert j["state"] == "succeeded" and j["attempt"] == 1, j
        assert png_ok(c.get(f"/v1/jobs/{jid}/result").body)
        # The head shows the job succeeded a moment before the agent reads its answer.
        wait_until(lambda: f"complete of job {jid} attempt 1 delivered after" in agent.log(), 10,
                   "the agent to see its completion delivered")
        assert "lost" not in agent.log(), agent.log()[-3000:]
    finally:
        agent.stop()
        if proxy.listener:
            proxy.close()


def test_agent_slow_head_does_not_get_a_healthy_runtime_killed(cluster):
    """The head stops answering (SIGSTOP) for longer than ping_timeout_ms while
    a job finishes: the controller keeps pinging its runtime (the completion
    waits in the outbox), so nothing is killed as hung, and the result is
    delivered once the head runs again."""
    head, make_agent = cluster
    # Results wait as files here (not in memory), so the test can see one queued.
    agent = make_agent("slowhead", gpus=1, extra="outbox_memory_bytes = 0")
    agent.wait_ready()
    c = head.client(head.add_tenant("slowhead"))
    jid = submit(c, {"capability": "image.fast", "params": {"prompt": "s", "sim_ms": 800}})["id"]
    wait_job(c, jid, 20, until=lambda j: j["state"] == "running"
             and j.get("phase") == "generating")
    pid = runtime_pids("slowhead-gpu0")[0]
    outbox = os.path.join(agent.dir, "work", "outbox", f"slowhead-gpu0-{jid}.1")
    os.kill(head.proc.pid, signal.SIGSTOP)
    try:
        # The run ends while the head is frozen: its result waits in the outbox.
        wait_until(lambda: os.path.exists(outbox), 10, "the result queued in the outbox")
        # What is under test is a timer: the head stays frozen for longer than
        # ping_timeout_ms (1.5 s) after the result came, while pings go on.
        until = time.monotonic() + 2.5 * SLOW
        wait_until(lambda: time.monotonic() >= until, 5, "ping_timeout_ms to pass")
        assert alive(pid), "the runtime was killed while the head was frozen"
    finally:
        os.kill(head.proc.pid, signal.SIGCONT)
    j = wait_job(c, jid, 40)
    assert j["state"] == "succeeded" and j["attempt"] == 1, j
    assert alive(pid), "the runtime was killed while the head was slow"
    assert "lost" not in agent.log(), agent.log()[-3000:]


def test_agent_with_a_one_outcome_outbox_runs_every_job_once(cluster):
    """An outbox of one outcome beside four slots is full after nearly every
    result: the worker takes no work while it is, and is woken to take it
    again when the head's answer leaves room (outbox_set_on_room). Every job
    still succeeds once, on its first attempt, with a whole result, and no
    outcome is dropped or lost on the way."""
    head, make_agent = cluster
    agent = make_agent("tiny", gpus=1, extra="concurrency = 4\noutbox_max_jobs = 1")
    agent.wait_ready()
    assert [w["concurrency"] for w in workers(head) if w["id"] == "tiny-gpu0"] == [4]
    c = head.client(head.add_tenant("tiny"))
    ids = [submit(c, {"capability": "image.fast", "params": {"prompt": f"t{i}", "sim_ms": 0}})["id"]
           for i in range(40)]
    for jid in ids:
        j = wait_job(c, jid, 60)
        assert j["state"] == "succeeded" and j["attempt"] == 1, j
        assert png_ok(c.get(f"/v1/jobs/{jid}/result").body)
    log = agent.log()
    assert "dropped" not in log and "lost" not in log, log[-3000:]


def test_agent_holds_a_job_ahead_and_starts_it_when_its_slot_frees(head_factory, tmp_path):
    """A busy GPU is handed its next job before its running one ends (here
    at once: the head's assign_ahead_s is large) and starts it when its slot
    frees, with no request between. The jobs still run one at a time on a
    one-slot GPU, in order, and a held job's execution timeout counts from
    its own start: each job runs 1.5 s under a 2 s timeout, so one timed
    from its hand-over (1.5 s earlier) would time out."""
    head = head_factory(config_text=HEAD_CONFIG + "[scheduler]\nassign_ahead_s = 3600\n")
    agent = Agent(head, tmp_path, "ahead", gpus=1).start()
    try:
        agent.wait_ready()
        assert [w["ahead"] for w in workers(head) if w["id"] == "ahead-gpu0"] == [1]
        c = head.client(head.add_tenant("ahead"))
        t0 = time.monotonic()
        ids = [submit(c, {"capability": "image.fast", "timeout_s": 2,
                          "params": {"prompt": f"a{i}", "width": 64, "height": 64,
                                     "sim_ms": 1500}})["id"] for i in range(3)]
        jobs = [wait_job(c, jid, 30) for jid in ids]
        took = time.monotonic() - t0
        for j in jobs:
            assert j["state"] == "succeeded" and j["attempt"] == 1, j
        assert took >= 3 * 1.5, took  # one at a time, never two at once
        text = head.admin().get("/metrics").body.decode()
        held = int(re.search(r"^gpuq_scheduler_held_ahead_total (\d+)$", text, re.M).group(1))
        started = int(re.search(r"^gpuq_scheduler_started_ahead_total (\d+)$", text,
                                re.M).group(1))
        # The second job is held from the first one's start; the third too,
        # unless the agent's poll for it came after the second ended.
        assert 1 <= held == started <= 2, (held, started)
    finally:
        agent.stop()


class OlderHead:
    """An HTTP front for a real head that answers as a head older than
    held ahead would: a register body with "ahead" gets the 400 its parser
    gives an unknown field; every other request goes through unchanged."""

    def __init__(self, head_url):
        u = urllib.parse.urlparse(head_url)
        target = (u.hostname, u.port)
        self.registers = []  # whether each register seen carried "ahead"
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _answer(self, status, body, ctype="application/json"):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _pass(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                if self.path.startswith("/v1/agent/register"):
                    had = "ahead" in json.loads(body)
                    outer.registers.append(had)
                    if had:
                        return self._answer(400, json.dumps({"error": {
                            "code": "unknown_field", "field": "ahead",
                            "message": "ahead: unknown field"}}).encode())
                conn = http.client.HTTPConnection(*target, timeout=90)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection", "content-length")}
                conn.request(self.command, self.path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                conn.close()
                self._answer(r.status, data, r.getheader("Content-Type") or "text/plain")

            do_GET = do_POST = do_DELETE = _pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_agent_registers_without_ahead_with_an_older_head_and_runs_jobs(cluster, tmp_path):
    """A head older than held ahead refuses the register field "ahead" as
    unknown (400 naming it). The agent then registers without it, once for
    all its workers, and runs jobs as before: no worker holds a job ahead."""
    head, _ = cluster
    older = OlderHead(head.url)
    agent = Agent(head, tmp_path, "older", gpus=2, head_url=older.url).start()
    try:
        agent.wait_ready()
        ws = [w for w in workers(head) if w["id"].startswith("older-")]
        assert sorted(w["ahead"] for w in ws) == [0, 0], ws
        # The first register carried it and was refused; none after did.
        assert older.registers[0] is True and older.registers.count(True) == 1, older.registers
        msgs = [json.loads(line)["msg"] for line in agent.log().splitlines()
                if line.startswith("{")]
        assert sum(m.startswith('the head does not accept "ahead"') for m in msgs) == 1, msgs
        c = head.client(head.add_tenant("older"))
        ids = [submit(c, {"capability": "image.fast",
                          "params": {"prompt": f"o{i}", "width": 64, "height": 64,
                                     "sim_ms": 50}})["id"] for i in range(6)]
        for jid in ids:
            j = wait_job(c, jid, 30)
            assert j["state"] == "succeeded" and j["attempt"] == 1, j
        text = head.admin().get("/metrics").body.decode()
        held = int(re.search(r"^gpuq_scheduler_held_ahead_total (\d+)$", text, re.M).group(1))
        assert held == 0, held
    finally:
        agent.stop()
        older.close()


def test_agent_flooding_runtime_is_killed_restarted_and_the_log_stays_small(cluster):
    head, make_agent = cluster
    agent = make_agent("flood", gpus=2)
    agent.wait_ready()
    c = head.client(head.add_tenant("flood"))
    with open(agent.fault_file, "w") as f:  # one-shot: the next job's runtime floods
        f.write("flood\n")
    jid = submit(c, {"capability": "image.fast", "params": {"prompt": "f"}})["id"]
    wait_until(lambda: "flooded its output" in agent.log(), 15, "the flood to be noticed")
    # The worker says it is degraded while the flood is fresh.
    wait_until(lambda: any(w["telemetry"]["health"] == "degraded" for w in workers(head)
                           if w["id"].startswith("flood-")), 5, "a degraded flood worker")
    j = wait_job(c, jid, 30)
    assert j["state"] == "succeeded" and j["attempt"] == 2, j
    assert png_ok(c.get(f"/v1/jobs/{jid}/result").body)
    agent.wait_ready()
    log = agent.log()
    assert "flooded its output with over 100 bad lines within 1000 ms" in log, log[-3000:]
    assert re.search(r"runtime flood: 101 bad lines within 1000 ms \(9[0-9] not logged\)", log), \
        log[-3000:]
    # The flood is cut within its first second, and the log holds a bounded
    # handful of its lines (10 at once, 2 a second), not millions.
    assert log.count("bad runtime line") <= 20, log.count("bad runtime line")
    assert os.path.getsize(agent.log_path) < 200_000, os.path.getsize(agent.log_path)


def test_agent_runtime_that_exits_at_once_is_restarted_with_backoff(cluster, tmp_path):
    head, make_agent = cluster
    fault_file = os.path.join(str(tmp_path), "exitfault")
    with open(fault_file, "w") as f:  # every start exits while this says "exit"
        f.write("exit\n")
    runtime = binary("gpuq-sim-runtime") + " --scale 0.001 --fault-file " + fault_file
    agent = make_agent("exit", gpus=1, runtime=runtime)
    t0 = time.monotonic()
    wait_until(lambda: agent.log().count("runtime started") >= 5, 10, "five starts")
    wait_until(lambda: time.monotonic() - t0 >= 3 * SLOW, 5, "three seconds of the fault")
    log = agent.log()
    # Backoff 50 ms doubling to 1 s: about 7 starts in 3 s, never a tight loop.
    delays = [int(x) for x in re.findall(r"restart \d+ in (\d+) ms", log)]
    assert delays[:5] == [50, 100, 200, 400, 800], delays
    assert max(delays) == 1000, delays
    # Each restart waited its delay: from the first start to the last, at
    # least the sum of the delays before it. (A count per wall second would
    # depend on how busy the machine is; this holds however slow it is.)
    starts = [json.loads(ln)["ts"] for ln in log.splitlines()
              if ln.startswith("{") and "runtime started" in ln]
    assert len(starts) >= 5, starts
    waited_ms = (starts[-1] - starts[0]) * 1000
    assert waited_ms >= 0.95 * sum(delays[:len(starts) - 1]), (waited_ms, delays, starts)
    assert not any(w["id"] == "exit-gpu0" and w["state"] == "ready" for w in workers(head))
    os.unlink(fault_file)
    agent.wait_ready()
    c = head.client(head.add_tenant("exit"))
    j = wait_job(c, submit(c, {"capability": "image.fast", "params": {"prompt": "e"}})["id"], 20)
    assert j["state"] == "succeeded", j


def test_agent_cancelled_running_job_frees_its_worker_for_the_next(cluster):
    head, make_agent = cluster
    agent = make_agent("cancel", gpus=1)
    agent.wait_ready()
    c = head.client(head.add_tenant("cancel"))
    jid = submit(c, {"capability": "image.fast", "params": {"prompt": "x", "sim_ms": 20000}})["id"]
    wait_job(c, jid, 20, until=lambda j: j["state"] == "running"
             and j.get("phase") == "generating")
    r = c.delete(f"/v1/jobs/{jid}")
    assert r.status in (200, 202), r
    wait_until(lambda: f"cancelling job {jid} attempt 1" in agent.log(), 10,
               "the agent to cancel the run")
    wait_until(lambda: f"job {jid} attempt 1 failed: cancelled" in agent.log(), 10,
               "the runtime to answer the cancel")
    # The only worker (concurrency 1) takes the next jobs: its slot came back.
    for i in range(2):
        j = wait_job(c, submit(c, {"capability": "image.fast",
                                   "params": {"prompt": f"n{i}", "sim_ms": 50}})["id"], 20)
        assert j["state"] == "succeeded" and j["worker_id"] == "cancel-gpu0", j
    assert c.get(f"/v1/jobs/{jid}").json()["state"] == "cancelled"
