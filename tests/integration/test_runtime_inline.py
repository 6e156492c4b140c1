"""Results on the runtime protocol: up to the agent's offer
($GPUQ_RESULT_INLINE_MAX, 64 KiB) they travel inline, framed by a length after
their result line; larger ones and older runtimes use a file. A real gpuqd
and gpuq-agent with a small Python runtime (inline_runtime.py) that answers
each job with bytes derived from its prompt; the client downloads them and
compares byte for byte. Every wait is bounded."""

import os

from gpuq_harness import binary
from inline_runtime import payload as expected  # the bytes the runtime sends
from test_agent import cluster, submit, wait_job  # noqa: F401 (cluster is a fixture)

HERE = os.path.dirname(os.path.abspath(__file__))


def inline_agent(make_agent, tmp_path, host, gpus=1):
    offer = tmp_path / f"{host}.offer"
    rt = f"/usr/bin/python3 {HERE}/inline_runtime.py {offer}"
    agent = make_agent(host, gpus=gpus, runtime=rt)
    agent.wait_ready()
    return agent, offer


def run(c, prompt, timeout_s=30):
    jid = submit(c, {"capability": "image.fast", "params": {"prompt": prompt}})["id"]
    return jid, wait_job(c, jid, timeout_s)


def test_runtime_results_inline_and_by_file_arrive_byte_exact(cluster, tmp_path):  # noqa: F811
    head, make_agent = cluster
    agent, offer = inline_agent(make_agent, tmp_path, "inl")
    assert offer.read_text() == "65536"
    c = head.client(head.add_tenant("inl"))
    # 65536: exactly the offer; 1: the smallest; bytes of every value, newlines
    # included, follow the line. Files: small and over the inline limit.
    cases = [("inline", 1), ("inline", 5000), ("inline", 65536), ("file", 10),
             ("file", 200000), ("inline", 3)]
    for i, (mode, size) in enumerate(cases):
        jid, j = run(c, f"{mode}:{size}:s{i}")
        assert j["state"] == "succeeded", j
        r = c.get(f"/v1/jobs/{jid}/result")
        assert r.status == 200, r
        assert r.body == expected(size, f"s{i}"), f"{mode} {size}: bytes differ"
    assert "bad runtime line" not in agent.log()


def test_runtime_oversized_or_malformed_inline_result_is_refused_naming_the_field(
        cluster, tmp_path):  # noqa: F811
    head, make_agent = cluster
    agent, _ = inline_agent(make_agent, tmp_path, "bad")
    c = head.client(head.add_tenant("bad"))
    # Over the offer: refused, its bytes skipped; the runtime stays up.
    jid, j = run(c, "oversize:70000:o")
    assert j["state"] == "dead", j
    assert j["error"]["class"] == "internal", j
    assert "outputs[0].bytes 70000 is over the inline limit of 65536" in j["error"]["message"], j
    assert "lost" not in agent.log()
    jid, j = run(c, "inline:777:after")
    assert j["state"] == "succeeded", j
    assert c.get(f"/v1/jobs/{jid}/result").body == expected(777, "after")
    # A length that is not a number: the bytes after it cannot be framed, so
    # the runtime is restarted (and the next job still runs).
    jid, j = run(c, "badbytes:500:b")
    assert j["state"] == "dead", j
    assert j["error"]["class"] == "internal", j
    assert "outputs[0].bytes must be a non-negative integer" in j["error"]["message"], j
    agent.wait_ready()
    jid, j = run(c, "inline:12:ok")
    assert j["state"] == "succeeded", j
    assert c.get(f"/v1/jobs/{jid}/result").body == expected(12, "ok")
