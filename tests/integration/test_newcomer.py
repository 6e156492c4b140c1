"""A newcomer's first hour, against real processes: the README's "Try it"
block run word for word (scripts/up with a fresh data directory, then the
block through bash), the admin key found with GPUQ_KEY exported, the
operator's controls end to end (undrain, tenant rm, key revoke and rotate,
pause and resume, promote), and the docs held to the code: every route of
docs/api in the route table and back, every command of docs/cli.md known to
gpuq."""

import json
import os
import re
import signal
import subprocess

import pytest

from gpuq_harness import ROOT, SLOW, FakeWorker, binary, wait_until, BUILD

CLI_TIMEOUT_S = 60 * SLOW


def gpuq(head, *args, key=None, env=None, cwd=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("GPUQ_")}
    e["GPUQ_URL"] = head.url
    e["HOME"] = head.data_dir  # no real ~/.local/share/gpuq/admin.key
    e.pop("XDG_DATA_HOME", None)
    if key is not None:
        e["GPUQ_KEY"] = key
    e.update(env or {})
    return subprocess.run([binary("gpuq"), *args], env=e, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, cwd=cwd)


def readme_block(title):
    """The first ```sh block after the heading `title` in README.md."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    at = text.index(title)
    m = re.search(r"```sh\n(.*?)```", text[at:], re.S)
    assert m, f"no sh block after {title!r}"
    return m.group(1)


# --- the README, word for word ------------------------------------------------

@pytest.fixture
def up(tmp_path):
    """scripts/up (what `make up` runs) with HOME in a temp dir, so that the
    README's ~/.local/share/gpuq paths are a fresh data directory; one
    simulated GPU; a free port instead of 7070."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUQ_") and k != "XDG_DATA_HOME"}
    env.update(HOME=str(home), GPUQ_SIM_GPUS="1")
    log = open(tmp_path / "up.log", "wb")
    proc = subprocess.Popen([os.path.join(ROOT, "scripts", "up"), BUILD, "127.0.0.1:0"],
                            env=env, stdout=log, stderr=log, start_new_session=True)
    data = home / ".local" / "share" / "gpuq"

    def ready():
        assert proc.poll() is None, (tmp_path / "up.log").read_text()
        return "gpuq is up." in (tmp_path / "up.log").read_text()

    try:
        wait_until(ready, 120, "make up to say it is up")
        yield {"home": home, "data": data, "env": env,
               "url": (data / "head.url").read_text().strip()}
    finally:
        if proc.poll() is None:
            # SIGTERM, not SIGINT: a test run started in the background
            # (`make test &`) inherits SIGINT ignored, and bash cannot trap a
            # signal ignored at its start, so scripts/up would never stop.
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60 * SLOW)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        kill_left_behind(str(home))


def kill_left_behind(marker):
    """scripts/up starts gpuqd and the agent in sessions of their own; if it
    was killed before it stopped them (the SIGKILL above), they would outlive
    the test. Every process whose command line names this test's home goes."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                named = marker.encode() in f.read()
            if named:
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def test_readme_try_it_word_for_word(up, tmp_path):
    block = readme_block("## Try it")
    assert "http://127.0.0.1:7070" in block
    # Then "Many jobs, many tenants", in the same shell (its exports) and
    # directory (it uploads the hen.png the first block downloaded).
    block += readme_block("### Many jobs, many tenants")
    # The only change: the port make up got instead of 7070.
    script = "set -euo pipefail\n" + block.replace("http://127.0.0.1:7070", up["url"])
    env = dict(up["env"])
    env["PATH"] = BUILD + os.pathsep + env["PATH"]
    work = tmp_path / "work"
    work.mkdir()
    p = subprocess.run(["bash", "-c", script], env=env, cwd=work, capture_output=True,
                       text=True, timeout=300 * SLOW)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    # What the block's comments promise.
    assert "job 1: succeeded" in out and (work / "1.png").exists(), out
    assert (work / "1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "estimated start in 0.0s" not in out
    # The batch of two ran, and the upscale of hen.png came back.
    assert (work / "jobs.jsonl").exists() and "image.fast" in out, out
    # The admin commands worked with GPUQ_KEY exported (a tenant key): the
    # tenant the block added is there, and its printed key works.
    admin = (up["data"] / "admin.key").read_text().strip()
    p = subprocess.run([binary("gpuq"), "tenant", "ls", "--json", "--key", admin],
                       env={**env, "GPUQ_URL": up["url"]}, capture_output=True, text=True,
                       timeout=CLI_TIMEOUT_S)
    names = [t["name"] for t in json.loads(p.stdout)["tenants"]]
    assert "acme" in names, p.stdout


def test_undrain_gives_the_real_agent_work_again(up, tmp_path):
    env = {**up["env"], "GPUQ_URL": up["url"]}
    key = (up["data"] / "tenant-local.key").read_text().strip()

    def run(*args, **kw):
        return subprocess.run([binary("gpuq"), *args], env={**env, **kw}, capture_output=True,
                              text=True, timeout=CLI_TIMEOUT_S, cwd=tmp_path)

    workers = json.loads(run("workers", "--json").stdout)["workers"]
    assert len(workers) == 1
    wid = workers[0]["id"]
    assert run("worker", "drain", wid).returncode == 0

    def state():
        return json.loads(run("workers", "--json").stdout)["workers"][0]["state"]

    wait_until(lambda: state() == "draining", 30, "the worker to drain")
    p = run("submit", "--capability", "image.fast", "--model", "image-v2", "--prompt", "x",
            GPUQ_KEY=key)
    assert p.returncode == 0, p.stderr
    jid = p.stdout.strip()
    job = json.loads(run("get", jid, "--json", GPUQ_KEY=key).stdout)
    assert job["state"] == "queued" and job["waiting_reason"], job
    # Still registered while drained; undrain and the job runs.
    assert run("worker", "undrain", wid).returncode == 0
    p = run("wait", jid, "--timeout", str(int(120 * SLOW)), GPUQ_KEY=key)
    assert p.returncode == 0, p.stderr
    p = run("result", jid, "--out", str(tmp_path), GPUQ_KEY=key)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"{tmp_path}/{jid}.png"
    assert os.path.getsize(p.stdout.strip()) > 0


# --- keys: the admin key wins over an exported GPUQ_KEY -------------------------

def test_admin_commands_find_the_admin_key_with_gpuq_key_exported(head):
    tenant = head.add_tenant("acme")
    env = {"GPUQ_DATA": head.data_dir}
    p = gpuq(head, "tenant", "add", "globex", key=tenant, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().startswith("gq_")
    # GPUQ_ADMIN_KEY comes first.
    p = gpuq(head, "tenant", "ls", key=tenant,
             env={"GPUQ_ADMIN_KEY": head.admin_key, "GPUQ_DATA": "/nonexistent"})
    assert p.returncode == 0 and "globex" in p.stdout, p.stderr
    # With no admin key anywhere, the tenant key is tried and the 403 says
    # which key was used and how to give the admin one.
    p = gpuq(head, "tenant", "ls", key=tenant, env={"GPUQ_DATA": "/nonexistent"})
    assert p.returncode == 1
    assert "$GPUQ_KEY" in p.stderr and "GPUQ_ADMIN_KEY" in p.stderr, p.stderr


def test_version_and_default_data_dir_in_help(tmp_path):
    for b in ("gpuq", "gpuqd", "gpuq-agent"):
        p = subprocess.run([binary(b), "--version"], capture_output=True, text=True, timeout=10)
        assert p.returncode == 0 and re.fullmatch(rf"{b} \d+\.\d+\.\d+\n", p.stdout), p
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    env.pop("GPUQ_DATA", None)
    for b in ("gpuq", "gpuqd"):
        p = subprocess.run([binary(b), "--help"], capture_output=True, text=True, env=env,
                           timeout=10)
        assert p.returncode == 0 and f"{tmp_path}/xdg/gpuq" in p.stdout, p.stdout


# --- everyday commands ----------------------------------------------------------

def test_plain_submit_prints_the_id_and_an_eta_and_result_downloads(head, tmp_path):
    key = head.add_tenant("acme")
    w = FakeWorker(head, head.add_worker_token()).start()
    p = gpuq(head, "submit", "--capability", "image.fast", "--prompt", "a fox", key=key)
    assert p.returncode == 0, p.stderr
    jid = p.stdout.strip()
    assert re.fullmatch(r"\d+", jid)
    assert re.search(rf"job {jid}: queued, estimated start (now|in \d+\.\ds)", p.stderr), p.stderr
    # Not finished yet: result says so.
    p = gpuq(head, "result", jid, key=key)
    assert p.returncode == 1 and "gpuq wait" in p.stderr
    a = w.poll()
    assert w.complete(a).status == 200
    p = gpuq(head, "wait", jid, key=key)
    assert p.returncode == 0 and "succeeded" in p.stderr, p.stderr
    p = gpuq(head, "get", jid, key=key)
    assert "succeeded" in p.stdout and "eta" not in p.stdout, p.stdout
    p = gpuq(head, "result", jid, "-o", str(tmp_path / "fox.png"), key=key)
    assert p.returncode == 0 and (tmp_path / "fox.png").read_bytes()[:4] == b"\x89PNG"
    os.mkdir(tmp_path / "out")
    e = {k: v for k, v in os.environ.items() if not k.startswith("GPUQ_")}
    e.update(GPUQ_URL=head.url, GPUQ_KEY=key, HOME=head.data_dir)
    proc = subprocess.Popen([binary("gpuq"), "submit", "--capability", "image.fast", "--wait",
                             "--out", str(tmp_path / "out")], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        a = wait_until(lambda: w.poll(wait=1), 30, "the second job")
        assert w.complete(a).status == 200
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.strip() == f"{tmp_path}/out/{a['job_id']}.png"
    assert os.path.exists(out.strip())


def test_wait_exit_codes_by_outcome(head):
    key = head.add_tenant("acme")
    w = FakeWorker(head, head.add_worker_token()).start()
    jid = gpuq(head, "submit", "--capability", "image.fast", key=key).stdout.strip()
    a = w.poll()
    assert w.fail(a, "bad_input", "no such sampler").status == 200
    p = gpuq(head, "wait", jid, key=key)
    assert p.returncode == 4 and "bad_input" in p.stderr, (p.returncode, p.stderr)
    jid = gpuq(head, "submit", "--capability", "image.fast", key=key).stdout.strip()
    assert gpuq(head, "cancel", jid, key=key).returncode == 0
    assert gpuq(head, "wait", jid, key=key).returncode == 7
    assert gpuq(head, "wait", "999999", key=key).returncode == 1


# --- operator controls ----------------------------------------------------------

def test_worker_undrain_reaches_the_agent_and_work_flows_again(head):
    key = head.add_tenant("acme")
    w = FakeWorker(head, head.add_worker_token()).start()
    assert gpuq(head, "worker", "drain", w.id, key=head.admin_key).returncode == 0
    assert w.heartbeat("draining").json()["drain"] is True
    api = head.client(key)
    job = api.post("/v1/jobs", {"capability": "image.fast"}).json()
    assert w.poll(wait=1) is None
    p = gpuq(head, "worker", "undrain", w.id, key=head.admin_key)
    assert p.returncode == 0 and "taking jobs again" in p.stdout
    assert w.heartbeat("ready").json()["drain"] is False
    a = wait_until(lambda: w.poll(wait=1), 20, "the job after undrain")
    assert a["job_id"] == job["id"]
    assert gpuq(head, "worker", "undrain", "nope", key=head.admin_key).returncode == 1


def test_tenant_rm_and_key_revoke_rotate(head):
    admin = head.admin_key
    key = head.add_tenant("acme")
    api = head.client(key)
    job = api.post("/v1/jobs", {"capability": "image.fast"}).json()
    # Rotate: a new key, printed once; the old one stops; the jobs stay its own.
    p = gpuq(head, "key", "rotate", "acme", key=admin)
    assert p.returncode == 0, p.stderr
    new = p.stdout.strip()
    assert new.startswith("gq_") and new != key
    assert head.client(key).get("/v1/jobs").status == 401
    assert head.client(new).get(f"/v1/jobs/{job['id']}").status == 200
    # Revoke: the key stops; the tenant stays listed.
    assert gpuq(head, "key", "revoke", "acme", key=admin).returncode == 0
    assert head.client(new).get("/v1/jobs").status == 401
    assert "acme" in gpuq(head, "tenant", "ls", key=admin).stdout
    rotated = gpuq(head, "key", "rotate", "acme", key=admin).stdout.strip()
    assert head.client(rotated).get("/v1/jobs").status == 200
    # Remove: the key stops, the name is free again, and a new tenant of that
    # name does not see the old one's jobs.
    assert gpuq(head, "tenant", "rm", "acme", key=admin).returncode == 0
    assert head.client(rotated).get("/v1/jobs").status == 401
    assert "acme" not in gpuq(head, "tenant", "ls", key=admin).stdout
    assert gpuq(head, "tenant", "rm", "acme", key=admin).returncode == 1
    again = head.add_tenant("acme")
    assert head.client(again).get(f"/v1/jobs/{job['id']}").status == 404
    # Durable: after a restart the removed and rotated keys stay as they were.
    head.stop()
    head.start()
    assert head.client(rotated).get("/v1/jobs").status == 401
    assert head.client(again).get("/v1/jobs").status == 200


def test_pause_resume_capability_and_lane(head):
    admin = head.admin_key
    key = head.add_tenant("acme")
    api = head.client(key)
    w = FakeWorker(head, head.add_worker_token()).start()
    running = api.post("/v1/jobs", {"capability": "image.fast"}).json()
    a = w.poll()
    assert a["job_id"] == running["id"]
    p = gpuq(head, "pause", "--capability", "image.fast", key=admin)
    assert p.returncode == 0 and "paused capability image.fast" in p.stdout, p.stderr
    queued = api.post("/v1/jobs", {"capability": "image.fast"}).json()
    # Running work finishes; queued work waits, saying why, with no ETA.
    assert w.complete(a).status == 200
    assert api.get(f"/v1/jobs/{running['id']}").json()["state"] == "succeeded"
    assert w.poll(wait=1) is None
    j = api.get(f"/v1/jobs/{queued['id']}").json()
    assert j["state"] == "queued" and j["eta"] is None and "paused" in j["waiting_reason"], j
    assert "image.fast" in gpuq(head, "pauses", key=admin).stdout
    p = gpuq(head, "resume", "--capability", "image.fast", key=admin)
    assert p.returncode == 0 and "nothing paused" in p.stdout
    a = wait_until(lambda: w.poll(wait=1), 20, "the job after resume")
    assert a["job_id"] == queued["id"]
    assert w.complete(a).status == 200
    # A lane: batch waits, interactive goes on.
    assert gpuq(head, "pause", "--lane", "batch", key=admin).returncode == 0
    b = api.post("/v1/jobs", {"capability": "image.fast", "lane": "batch"}).json()
    i = api.post("/v1/jobs", {"capability": "image.fast"}).json()
    a = wait_until(lambda: w.poll(wait=1), 20, "the interactive job")
    assert a["job_id"] == i["id"]
    assert w.complete(a).status == 200
    assert w.poll(wait=1) is None
    assert "batch lane is paused" in api.get(f"/v1/jobs/{b['id']}").json()["waiting_reason"]
    assert gpuq(head, "resume", "--lane", "batch", key=admin).returncode == 0
    a = wait_until(lambda: w.poll(wait=1), 20, "the batch job")
    assert a["job_id"] == b["id"]
    # Bad input names the flag; tenants may not pause.
    assert gpuq(head, "pause", "--lane", "slow", key=admin).returncode == 2
    assert gpuq(head, "pause", "--capability", "image.fast", key=key,
                env={"GPUQ_DATA": "/nonexistent"}).returncode == 1


def test_promote_moves_a_job_to_the_front(head):
    admin = head.admin_key
    key = head.add_tenant("acme")
    api = head.client(key)
    assert gpuq(head, "pause", "--capability", "image.fast", key=admin).returncode == 0
    ids = [api.post("/v1/jobs", {"capability": "image.fast"}).json()["id"] for _ in range(3)]
    p = gpuq(head, "promote", ids[2], key=admin)
    assert p.returncode == 0 and "front" in p.stdout, p.stderr
    w = FakeWorker(head, head.add_worker_token()).start()
    assert gpuq(head, "resume", "--capability", "image.fast", key=admin).returncode == 0
    order = []
    for _ in range(3):
        a = wait_until(lambda: w.poll(wait=1), 20, "the next job")
        order.append(a["job_id"])
        assert w.complete(a).status == 200
    assert order == [ids[2], ids[0], ids[1]]
    # A finished job cannot move; a tenant cannot promote.
    p = gpuq(head, "promote", ids[0], key=admin)
    assert p.returncode == 1 and "not queued" in p.stderr
    assert head.client(key).post(f"/v1/jobs/{ids[0]}/promote").status == 403


# --- the docs hold -------------------------------------------------------------

def route_table():
    with open(os.path.join(ROOT, "src", "api", "routes.c")) as f:
        text = f.read()
    table = text[text.index("static const struct route routes[]"):]
    # The table names the root "/" as the empty path.
    return {(m, re.sub(r"\{[^}]+\}", "{}", p) or "/")
            for m, p in re.findall(r'\{"(GET|POST|DELETE|PUT|PATCH)", "([^"]*)"', table)}


def test_every_documented_route_exists_and_every_route_is_documented():
    import yaml  # python3-yaml: scripts/install-deps installs it
    with open(os.path.join(ROOT, "docs", "api", "openapi.yaml")) as f:
        spec = yaml.safe_load(f)
    documented = {(m.upper(), re.sub(r"\{[^}]+\}", "{}", p))
                  for p, ops in spec["paths"].items() for m in ops
                  if m in ("get", "post", "delete", "put", "patch")}
    with open(os.path.join(ROOT, "docs", "protocol-worker.md")) as f:
        worker_doc = f.read()
    routes = route_table()
    agent = {r for r in routes if r[1].startswith("/v1/agent/")}
    assert documented - routes == set(), "documented but not served"
    missing = routes - documented - agent
    assert missing == set(), "served but not in docs/api/openapi.yaml"
    in_worker_doc = {(m, re.sub(r"\{[^}]+\}", "{}", p))
                     for m, p in re.findall(r"`(GET|POST|DELETE) (/v1/agent/[^`? ]*)", worker_doc)}
    assert agent == in_worker_doc, "agent routes vs docs/protocol-worker.md"
    with open(os.path.join(ROOT, "docs", "api", "README.md")) as f:
        readme = f.read()
    for m, p in re.findall(r"`(GET|POST|DELETE) (/[^`?\[ ]*)", readme):
        assert (m, re.sub(r"\{[^}]+\}", "{}", p)) in routes, (m, p)


def test_every_command_in_docs_cli_runs():
    with open(os.path.join(ROOT, "docs", "cli.md")) as f:
        text = f.read()
    cmds = set()
    for line in re.findall(r"`gpuq ([a-z][a-z -]*)", text):
        words = [w for w in line.split() if re.fullmatch(r"[a-z][a-z-]*", w)]
        if words:
            cmds.add(tuple(words[:2]))
    assert len(cmds) >= 15, cmds
    for words in sorted(cmds):
        p = subprocess.run([binary("gpuq"), *words, "--help"], capture_output=True, text=True,
                           timeout=10)
        if p.returncode != 0 and len(words) == 2:  # the second word was an argument
            p = subprocess.run([binary("gpuq"), words[0], "--help"], capture_output=True,
                               text=True, timeout=10)
        assert p.returncode == 0 and "usage: gpuq" in p.stdout, (words, p.stderr)
