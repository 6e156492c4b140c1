"""POST /v1/agent/outcomes (docs/protocol-worker.md): several completions in
one request. Each item keeps every guarantee of a single complete: fencing
(a stale attempt is refused, the others still land), durability before the
200, duplicates recognised; a malformed batch changes nothing. And the agent
uses it by default, falls back to one request each when configured so."""
import json

from gpuq_harness import FakeWorker, tiny_png, wait_until
from test_agent import HEAD_CONFIG, Agent, Proxy, submit, wait_job

JOB = {"capability": "image.fast", "params": {"prompt": "a fox", "sim_ms": 0}}


def batch_body(items):
    """items: (assignment, worker_id, attempt, bytes) → the request body."""
    head = {"protocol": 1, "outcomes": [
        {"job_id": a["job_id"], "worker_id": wid, "attempt": att, "content_type": "image/png",
         "bytes": len(data), "load_ms": 0, "run_ms": 5, "cold": False}
        for a, wid, att, data in items]}
    return json.dumps(head, separators=(",", ":")).encode() + b"\n" + b"".join(
        data for _, _, _, data in items)


def post_batch(worker, body):
    return worker.c.request("POST", "/v1/agent/outcomes", body=body, raw=True,
                            headers={"Content-Type": "application/x-gpuq-outcomes"})


def two_assigned(head):
    c = head.client(head.add_tenant("acme"))
    token = head.add_worker_token()
    w1 = FakeWorker(head, token, "gpu-a").start()
    w2 = FakeWorker(head, token, "gpu-b").start()
    jobs = [submit(c, JOB)["id"] for _ in range(2)]
    got = [w1.poll(), w2.poll()]
    assert sorted(a["job_id"] for a in got) == sorted(jobs)
    return c, (w1, got[0]), (w2, got[1])


def test_batch_completes_every_job_with_its_own_bytes(head):
    c, (w1, a1), (w2, a2) = two_assigned(head)
    p1, p2 = tiny_png(seed=11), tiny_png(width=12, seed=12)
    r = post_batch(w1, batch_body([(a1, w1.id, a1["attempt"], p1),
                                   (a2, w2.id, a2["attempt"], p2)]))
    assert r.status == 200, r
    res = r.json()["results"]
    assert [x["job_id"] for x in res] == [a1["job_id"], a2["job_id"]]
    assert all(x["status"] == 200 and x["duplicate"] is False for x in res), res
    # 200 means durable and visible: no wait needed.
    for a, png in ((a1, p1), (a2, p2)):
        j = c.get(f"/v1/jobs/{a['job_id']}").json()
        assert j["state"] == "succeeded" and j["result"]["bytes"] == len(png), j
        assert c.get(f"/v1/jobs/{a['job_id']}/result").body == png
    # The same batch again (a retried request): each is a duplicate, not stored twice.
    again = post_batch(w1, batch_body([(a1, w1.id, a1["attempt"], p1),
                                       (a2, w2.id, a2["attempt"], p2)]))
    assert again.status == 200
    assert [x["duplicate"] for x in again.json()["results"]] == [True, True]


def test_batch_fences_each_item_on_its_own(head):
    c, (w1, a1), (w2, a2) = two_assigned(head)
    png = tiny_png(seed=5)
    # a2 named with the wrong worker and a2's right attempt on a wrong one: both stale.
    r = post_batch(w1, batch_body([(a1, w1.id, a1["attempt"], png),
                                   (a2, w1.id, a2["attempt"], png),
                                   (a2, w2.id, a2["attempt"] + 1, png)]))
    assert r.status == 200, r
    res = r.json()["results"]
    assert res[0]["status"] == 200
    assert res[1]["status"] == 409 and res[1]["error"]["code"] == "stale_attempt", res
    assert res[2]["status"] == 409 and res[2]["error"]["code"] == "stale_attempt", res
    assert c.get(f"/v1/jobs/{a1['job_id']}").json()["state"] == "succeeded"
    j2 = c.get(f"/v1/jobs/{a2['job_id']}").json()
    assert j2["state"] == "running" and j2["worker_id"] == w2.id, j2
    # The real holder still completes it.
    ok = post_batch(w2, batch_body([(a2, w2.id, a2["attempt"], png)]))
    assert ok.status == 200 and ok.json()["results"][0]["status"] == 200


def test_malformed_batch_is_refused_whole_naming_the_field(head):
    c, (w1, a1), (w2, a2) = two_assigned(head)
    png = tiny_png()
    good = batch_body([(a1, w1.id, a1["attempt"], png)])
    cases = [
        (good + b"x", "bytes"),                              # bytes do not add up
        (good.replace(b"\n", b" ", 1), "body"),              # no header line
        (b"[1]\n", "body"),                                  # header not an object
        (good.replace(b'"protocol":1', b'"protocol":2'), "protocol"),
        (good.replace(b'"cold":false', b'"colour":1'), "outcomes[0].colour"),
        (good.replace(b'"attempt":1', b'"attempt":0'), "outcomes[0].attempt"),
        (good.replace(('"job_id":"%s"' % a1["job_id"]).encode(), b'"job_id":"x1"'),
         "outcomes[0].job_id"),
        (b'{"protocol":1,"outcomes":[]}\n', "outcomes"),
    ]
    for body, field in cases:
        r = post_batch(w1, body)
        assert r.status == 400, (field, r)
        assert r.json()["error"]["field"] == field, (field, r.json())
    # Nothing was applied.
    assert c.get(f"/v1/jobs/{a1['job_id']}").json()["state"] == "running"


def test_batch_needs_a_worker_token(head):
    c = head.client(head.add_tenant("acme"))
    r = c.request("POST", "/v1/agent/outcomes", body=b'{"protocol":1,"outcomes":[]}\n',
                  raw=True, headers={"Content-Type": "application/x-gpuq-outcomes"})
    assert r.status == 403, r


class Sniff(Proxy):
    """The test_agent proxy, counting the agent's request lines by path."""

    def __init__(self, target_url):
        self.outcomes = self.singles = 0
        super().__init__(target_url)

    def _forward(self, src, dst, data):
        if src.getsockname()[1] == self.port:  # agent → head (the other way is not looked at)
            with self.lock:
                self.outcomes += data.count(b"POST /v1/agent/outcomes ")
                self.singles += data.count(b"/complete?")
        dst.sendall(data)


def run_jobs(head_factory, tmp_path, extra, n=24):
    head = head_factory(config_text=HEAD_CONFIG)
    proxy = Sniff(head.url)
    link = type("ViaProxy", (), {})()
    link.url, link.add_worker_token = proxy.url, head.add_worker_token
    agent = Agent(link, tmp_path, "ob", gpus=4, extra=extra).start()
    try:
        wait_until(lambda: sum(1 for w in head.admin().get("/v1/workers").json()["workers"]
                               if w["state"] == "ready") == 4, 20, "4 workers ready")
        c = head.client(head.add_tenant("t"))
        ids = [submit(c, JOB)["id"] for _ in range(n)]
        for jid in ids:
            j = wait_job(c, jid, 30)
            assert j["state"] == "succeeded" and j["attempt"] == 1, j
            assert c.get(f"/v1/jobs/{jid}/result").body[:8] == b"\x89PNG\r\n\x1a\n"
        with proxy.lock:
            return agent.log(), proxy.outcomes, proxy.singles
    finally:
        agent.stop()
        proxy.close()


def test_agent_delivers_results_in_batches_by_default(head_factory, tmp_path):
    log, batches, singles = run_jobs(head_factory, tmp_path, "")
    assert batches >= 1 and singles == 0, (batches, singles)
    assert "one by one" not in log and "dropped" not in log, log[-3000:]


def test_agent_with_batches_off_speaks_the_single_protocol(head_factory, tmp_path):
    log, batches, singles = run_jobs(head_factory, tmp_path, "outbox_batch = false")
    assert batches == 0 and singles == 24, (batches, singles)
    assert "dropped" not in log, log[-3000:]
