"""Worker tokens: listed (never their secrets) and revoked by the admin, over
the API and with `gpuq worker-token ls|revoke`; an agent whose token is revoked
is refused (401) from its next request on, a real gpuq-agent included, and the
revocation survives a restart. Every wait is bounded and ends on an observed
answer or log line."""

from gpuq_harness import SLOW, FakeWorker, wait_until
from test_agent import HEAD_CONFIG, Agent
from test_cli import gpuq, gpuq_json


def test_list_and_revoke_over_the_api_refuse_the_agent_at_its_next_request(head):
    admin = head.admin()
    r = admin.post("/v1/worker-tokens", {"name": "rack1"})
    assert r.status == 201, r
    rack1 = r.json()
    keep = head.add_worker_token("rack2")
    v = admin.get("/v1/worker-tokens").json()["worker_tokens"]
    assert {t["name"] for t in v} >= {"rack1", "rack2"}
    assert all(set(t) == {"id", "name", "created_ms"} for t in v)    # no secret
    assert rack1["token"] not in str(v)
    assert [t["id"] for t in v if t["name"] == "rack1"] == [rack1["id"]]

    w = FakeWorker(head, rack1["token"], "gpu-a").start()
    other = FakeWorker(head, keep, "gpu-b").start()
    r = admin.delete(f"/v1/worker-tokens/{rack1['id']}")
    assert r.status == 200 and r.json()["revoked"] is True, r
    assert w.heartbeat().status == 401                  # its very next request
    assert w.c.post("/v1/agent/register", {}).status == 401
    assert other.heartbeat().status == 200              # the others still work
    names = [t["name"] for t in admin.get("/v1/worker-tokens").json()["worker_tokens"]]
    assert "rack1" not in names and "rack2" in names
    r = admin.delete(f"/v1/worker-tokens/{rack1['id']}")
    assert r.status == 404 and r.json()["error"]["field"] == "id", r
    tenant = head.client(head.add_tenant("acme"))
    assert tenant.get("/v1/worker-tokens").status == 403
    assert tenant.delete(f"/v1/worker-tokens/{rack1['id']}").status == 403

    head.stop()                                          # durable: still revoked after
    head.start()
    assert FakeWorker(head, rack1["token"], "gpu-a").c.post(
        "/v1/agent/heartbeat", {}).status == 401
    assert FakeWorker(head, keep, "gpu-b").heartbeat().status in (200, 404)


def test_a_real_agent_is_refused_once_its_token_is_revoked(head_factory, tmp_path):
    head = head_factory(config_text=HEAD_CONFIG)
    agent = Agent(head, tmp_path, "rev", gpus=1).start()
    try:
        agent.wait_ready()
        admin = head.admin()
        toks = admin.get("/v1/worker-tokens").json()["worker_tokens"]
        (tid,) = [t["id"] for t in toks if t["name"] == "rev"]
        assert admin.delete(f"/v1/worker-tokens/{tid}").status == 200
        wait_until(lambda: "401" in agent.log(), 20 * SLOW,
                   "the agent to be refused with 401")
        # Its GPU is gone once its TTL passes: nothing it sends is taken.
        wait_until(lambda: not [w for w in admin.get("/v1/workers").json()["workers"]
                                if w["id"].startswith("rev-")], 30 * SLOW,
                   "the revoked agent's GPU to leave the registry")
    finally:
        agent.stop()


def test_cli_worker_token_ls_and_revoke(head):
    t = gpuq_json(head, "worker-token", "add", "rack9", key=head.admin_key)
    listed = gpuq_json(head, "worker-token", "ls", key=head.admin_key)
    assert [x["id"] for x in listed["worker_tokens"] if x["name"] == "rack9"] == [t["id"]]
    p = gpuq(head, "worker-token", "ls", key=head.admin_key)
    assert p.returncode == 0 and "rack9" in p.stdout and t["token"] not in p.stdout
    p = gpuq(head, "worker-token", "revoke", "rack9", key=head.admin_key)
    assert p.returncode == 0, p.stderr
    assert "revoked" in p.stdout + p.stderr
    assert FakeWorker(head, t["token"], "gpu-x").c.post("/v1/agent/heartbeat", {}).status == 401
    p = gpuq(head, "worker-token", "revoke", "rack9", key=head.admin_key)
    assert p.returncode != 0 and "rack9" in p.stderr
