"""The live dashboard (R37) in a real browser, and the fleet API behind it: a
real gpuqd, a real gpuq-agent with three simulated GPUs, and Debian's headless
chromium driven over the DevTools protocol (cdp.py, with python3-websocket).
Both are installed by scripts/install-deps (make test runs it): where they are
missing the test fails, it does not skip. Every wait is bounded and ends on an
observed state."""

import http.client
import json
import os
import time

import pytest

from cdp import Chromium, find_chromium, websocket
from gpuq_harness import BUILD, ROOT, SLOW, wait_until
from test_agent import HEAD_CONFIG, Agent, submit

SHOT_DIR = os.path.join(BUILD, "test-screenshots")


@pytest.fixture
def fleet(head_factory, tmp_path):
    head = head_factory(config_text=HEAD_CONFIG)
    agent = Agent(head, tmp_path, "dash", gpus=3).start()
    agent.wait_ready()
    yield head, agent
    agent.stop()


def test_dashboard_shows_every_gpu_and_a_job_starting_within_2s(fleet):
    head, agent = fleet
    assert find_chromium(), "chromium is not installed: scripts/install-deps installs it"
    assert websocket is not None, \
        "python3-websocket is not installed: scripts/install-deps installs it"
    tenant = head.client(head.add_tenant("painter"))
    gpus = agent.worker_ids()
    with Chromium(start_timeout_s=60 * SLOW, command_timeout_s=30 * SLOW) as b:
        status = b.navigate(head.url + "/", timeout_s=60 * SLOW)
        assert status == 200
        b.type("#key", head.admin_key)
        b.click("#connect")
        b.wait_for(f"{json.dumps(gpus)}.every((id) =>"
                   f" document.querySelector(`.gpu[data-gpu=\"${{id}}\"]`))",
                   60 * SLOW, "every GPU card")
        shown = b.evaluate("[...document.querySelectorAll('.gpu')].map((c) => c.dataset.gpu)")
        assert sorted(shown) == sorted(gpus)
        # The key was taken out of the field and never put in the URL.
        assert b.evaluate("document.querySelector('#key').value") == ""
        assert head.admin_key not in b.url()

        job = submit(tenant, {"capability": "image.fast",
                              "params": {"prompt": "dash", "width": 256, "height": 256,
                                         "sim_ms": int(20000 * SLOW)}})

        def running():
            j = tenant.get(f"/v1/jobs/{job['id']}").json()
            return j if j["state"] == "running" else None

        started = wait_until(running, 20 * SLOW, f"job {job['id']} to start")
        sel = json.dumps(f'.job[data-job="{job["id"]}"]')
        b.wait_for(f"document.querySelector({sel}) !== null", 15 * SLOW,
                   f"job {job['id']} on the page")
        seen_ms = b.evaluate(f"window.gpuqSeenJobs.get({json.dumps(job['id'])})")
        card = b.evaluate(f"document.querySelector({sel}).closest('.gpu').dataset.gpu")
        assert card == started["worker_id"]
        delay_ms = seen_ms - started["started_ms"]
        print(f"dashboard showed job {job['id']} {delay_ms} ms after it started")
        assert delay_ms <= 2000 * SLOW, f"the page showed the job {delay_ms} ms after it started"

        os.makedirs(SHOT_DIR, exist_ok=True)
        shot = os.path.join(SHOT_DIR, "dashboard.png")
        b.screenshot(shot)
        assert os.path.getsize(shot) > 10000
        # Read what arrived meanwhile (console, requests) before judging it.
        b.evaluate("1")
        assert b.errors == [], b.errors
        foreign = [u for u in b.requests
                   if not u.startswith(head.url) and not u.startswith("data:")]
        assert foreign == [], f"the page fetched from elsewhere: {foreign}"
        tenant.delete(f"/v1/jobs/{job['id']}")


def test_fleet_api_needs_a_key(head):
    r = head.client(key=None).get("/v1/fleet")
    assert r.status == 401, r
    r = head.client(key="not-a-key").get("/v1/fleet/events")
    assert r.status == 401, r


def test_fleet_api_scopes_a_tenant_to_its_own_jobs(fleet):
    head, agent = fleet
    mine = head.client(head.add_tenant("mine"))
    theirs = head.client(head.add_tenant("theirs"))
    jobs = {}
    for name, c in (("mine", mine), ("theirs", theirs)):
        jobs[name] = submit(c, {"capability": "image.fast",
                                "params": {"prompt": name, "width": 256, "height": 256,
                                           "sim_ms": int(20000 * SLOW)}})["id"]

    def both_running():
        v = head.admin().get("/v1/fleet").json()
        ids = {j["id"] for g in v["gpus"] for j in g["jobs"]}
        return v if set(jobs.values()) <= ids else None

    admin_view = wait_until(both_running, 20 * SLOW, "both jobs running in the fleet view")
    assert admin_view["scope"] == "admin"
    assert {t["name"] for t in admin_view["tenants"]} >= {"mine", "theirs"}
    assert {d["job"] for d in admin_view["decisions"]} >= set(jobs.values())
    assert sum(q["running"] for q in admin_view["queues"]) >= 2

    v = mine.get("/v1/fleet").json()
    assert v["scope"] == "tenant"
    assert len(v["gpus"]) == 3                      # the fleet is shared
    shown = [j for g in v["gpus"] for j in g["jobs"]]
    assert jobs["mine"] in [j["id"] for j in shown]
    assert f'"{jobs["theirs"]}"' not in json.dumps(v)  # not on a card, not a decision
    assert any(j["id"] is None for j in shown)      # their job: busy, nameless
    assert [t["name"] for t in v["tenants"]] == ["mine"]
    assert {d["job"] for d in v["decisions"]} == {jobs["mine"]}
    for name, c in (("mine", mine), ("theirs", theirs)):
        c.delete(f"/v1/jobs/{jobs[name]}")


def test_fleet_events_stream_pushes_a_change(fleet):
    """The stream sends a snapshot at once, then another when the fleet changes."""
    head, agent = fleet
    tenant = head.client(head.add_tenant("streamer"))
    host, port = head.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20 * SLOW)
    conn.request("GET", "/v1/fleet/events", headers={"Authorization": f"Bearer {head.admin_key}"})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Content-Type").startswith("text/event-stream")

    def next_snapshot():
        data = []
        while True:
            line = resp.fp.readline().decode()
            assert line, "the stream ended"
            line = line.rstrip("\n")
            if line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and data:
                return json.loads("".join(data))

    first = next_snapshot()
    assert len(first["gpus"]) == 3
    job = submit(tenant, {"capability": "image.fast",
                          "params": {"prompt": "s", "width": 256, "height": 256,
                                     "sim_ms": int(20000 * SLOW)}})["id"]
    deadline = time.monotonic() + 20 * SLOW
    while True:
        assert time.monotonic() < deadline, "no snapshot showed the job running"
        snap = next_snapshot()
        if any(j["id"] == job for g in snap["gpus"] for j in g["jobs"]):
            break
    conn.close()
    tenant.delete(f"/v1/jobs/{job}")


class Stream:
    """One GET /v1/fleet/events connection, read snapshot by snapshot."""

    def __init__(self, head, key):
        host, port = head.url.split("//")[1].split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=20 * SLOW)
        self.conn.request("GET", "/v1/fleet/events", headers={"Authorization": f"Bearer {key}"})
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200

    def next(self):
        data = []
        while True:
            line = self.resp.fp.readline().decode()
            assert line, "the stream ended"
            line = line.rstrip("\n")
            if line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and data:
                return json.loads("".join(data))

    def until(self, pred, what):
        deadline = time.monotonic() + 20 * SLOW
        while True:
            assert time.monotonic() < deadline, what
            snap = self.next()
            if pred(snap):
                return snap


def test_fleet_streams_of_several_scopes_share_snapshots_but_keep_their_scope(fleet):
    """Streams share one snapshot per tick (one per scope): two admin streams and
    one stream per tenant open at once each see what their scope may see."""
    head, agent = fleet
    mine_key, theirs_key = head.add_tenant("mine"), head.add_tenant("theirs")
    streams = {"admin1": Stream(head, head.admin_key), "admin2": Stream(head, head.admin_key),
               "mine": Stream(head, mine_key), "theirs": Stream(head, theirs_key)}
    jobs = {}
    for name, key in (("mine", mine_key), ("theirs", theirs_key)):
        jobs[name] = submit(head.client(key), {
            "capability": "image.fast",
            "params": {"prompt": name, "width": 256, "height": 256,
                       "sim_ms": int(20000 * SLOW)}})["id"]

    def running(snap):
        return sum(len(g["jobs"]) for g in snap["gpus"]) >= 2

    for name, s in streams.items():
        snap = s.until(running, f"stream {name}: no snapshot with both jobs running")
        ids = {j["id"] for g in snap["gpus"] for j in g["jobs"]}
        text = json.dumps(snap)
        if name.startswith("admin"):
            assert snap["scope"] == "admin"
            assert set(jobs.values()) <= ids
            assert {t["name"] for t in snap["tenants"]} >= {"mine", "theirs"}
        else:
            other = "theirs" if name == "mine" else "mine"
            assert snap["scope"] == "tenant"
            assert jobs[name] in ids and None in ids
            assert f'"{jobs[other]}"' not in text
            assert [t["name"] for t in snap["tenants"]] == [name]
            assert snap["totals"]["running"] >= 2     # the totals are shown to all
    for s in streams.values():
        s.conn.close()
    for name, key in (("mine", mine_key), ("theirs", theirs_key)):
        head.client(key).delete(f"/v1/jobs/{jobs[name]}")


def test_dashboard_page_and_assets_are_served_from_the_binary(head):
    c = head.client(key=None)
    page = c.get("/")
    assert page.status == 200 and page.header("Content-Type").startswith("text/html")
    assert b"/ui/dash.js" in page.body
    assert "default-src 'none'" in page.header("Content-Security-Policy")
    for name, kind in (("dash.js", "text/javascript"), ("dash.css", "text/css"),
                       ("index.html", "text/html")):
        r = c.get(f"/ui/{name}")
        assert r.status == 200 and r.header("Content-Type").startswith(kind), r
        with open(os.path.join(ROOT, "web", name), "rb") as f:
            assert r.body == f.read()
    assert c.get("/ui/missing.js").status == 404
    assert c.post("/", {}).status == 405
