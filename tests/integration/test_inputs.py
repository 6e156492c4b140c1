"""Job inputs and free-form params end to end: uploads (POST /v1/inputs) that
jobs name in params.inputs, handed by a real gpuq-agent to the real
gpuq-sim-runtime as local files, and params.extra passed to the runtime
untouched. Every wait is bounded and ends on an observed condition."""

import json
import os
import sqlite3
import struct
import subprocess
import zlib

import pytest

from gpuq_harness import Head, binary, tiny_png, wait_until
from test_agent import Agent, submit, wait_job

HEAD_CONFIG = """
[workers]
heartbeat_ms = 200
ttl_ms = 5000
[jobs]
max_input_bytes = 65536
max_extra_bytes = 1024
"""


# --- helpers -----------------------------------------------------------------

def fnv1a64(data):
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def png_pixels(data):
    """(width, height, rows of RGB bytes) of an 8-bit RGB PNG, all filters undone."""
    pos, idat, ihdr = 8, b"", None
    while pos + 12 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + n
    w, h, depth, color = ihdr[:4]
    assert depth == 8 and color == 2, ihdr
    raw, stride, rows, prev = zlib.decompress(idat), w * 3, [], bytearray(w * 3)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b, c = prev[i], prev[i - 3] if i >= 3 else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, rows


def drawn_hash(png):
    """The 64-bit value the sim runtime draws from its input: pixel i (rows read
    left to right) white for bit i (most significant first)."""
    w, _, rows = png_pixels(png)
    v = 0
    for i in range(64):
        px = rows[i // w][(i % w) * 3:(i % w) * 3 + 3]
        assert px in (b"\xff\xff\xff", b"\x00\x00\x00"), (i, px)
        v = (v << 1) | (px == b"\xff\xff\xff")
    return v


def upload(client, data, content_type="image/png"):
    r = client.post("/v1/inputs", data, raw=True, headers={"Content-Type": content_type})
    assert r.status == 201, r
    return r.json()


def count_rows(head, table):
    db = sqlite3.connect(f"file:{head.data_dir}/gpuq.db?mode=ro", uri=True)
    try:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        db.close()


@pytest.fixture
def env(head_factory, tmp_path):
    head = head_factory(config_text=HEAD_CONFIG)
    agents = []

    def make_agent(host="in", **kw):
        a = Agent(head, tmp_path, host, **kw).start()
        agents.append(a)
        return a

    yield head, make_agent, tmp_path
    for a in agents:
        a.stop()


# --- tests -------------------------------------------------------------------

def test_input_image_shapes_the_output(env):
    head, make_agent, _ = env
    agent = make_agent(gpus=1)
    agent.wait_ready()
    c = head.client(head.add_tenant("acme"))
    images = [tiny_png(16, 16, seed=s) for s in (1, 2)]
    outs = []
    for img in images:
        up = upload(c, img)
        assert up["bytes"] == len(img) and up["id"].startswith("in_")
        job = submit(c, {"capability": "upscale", "params": {"inputs": {"image": up["id"]}}})
        assert job["params"]["inputs"] == {"image": up["id"]}
        done = wait_job(c, job["id"], 30)
        assert done["state"] == "succeeded", done
        r = c.get(f"/v1/jobs/{job['id']}/result")
        assert r.status == 200, r
        outs.append(r.body)
    # Each output carries its own input's hash; the two differ.
    for img, out in zip(images, outs):
        assert drawn_hash(out) == fnv1a64(img)
    assert outs[0] != outs[1]
    # The agent removed the job's input files once it was done with them.
    work = os.path.join(agent.dir, "work", "inputs")
    wait_until(lambda: os.path.isdir(work) and not os.listdir(work), 10,
               "the agent's input directories to go")


def test_extra_reaches_the_runtime_untouched(env):
    head, make_agent, tmp = env
    record = os.path.join(str(tmp), "runs.jsonl")
    agent = make_agent(gpus=1, runtime=f"{binary('gpuq-sim-runtime')} --scale 0.001 "
                                       f"--record {record}")
    agent.wait_ready()
    c = head.client(head.add_tenant("acme"))
    extra = {"lora": {"name": "pixel-art", "weight": 0.75}, "sampler": "dpmpp_2m",
             "negative_prompt_2": "blurry", "tags": [1, "two", None, True, {"k": [[]]}],
             "unicode": "caf\u00e9 \u2603"}
    job = submit(c, {"capability": "image.fast", "params": {"prompt": "p", "extra": extra}})
    assert job["params"]["extra"] == extra
    assert wait_job(c, job["id"], 30)["state"] == "succeeded"
    with open(record) as f:
        runs = [json.loads(line) for line in f]
    mine = [m for m in runs if m["id"] == f"{job['id']}.1"]
    assert len(mine) == 1, runs
    assert mine[0]["params"]["extra"] == extra
    assert mine[0]["params"]["prompt"] == "p"


def test_bounds_are_refused_by_field_and_nothing_is_stored(env):
    head, _, _ = env
    c = head.client(head.add_tenant("acme"))
    deep = {}
    cur = deep
    for _ in range(8):  # extra itself is depth 1: this is 9
        cur["d"] = {}
        cur = cur["d"]
    cases = [
        ({"extra": deep}, "params.extra", "nested deeper than 8"),
        ({"extra": {"s": "x" * 2000}}, "params.extra", "max_extra_bytes"),
        ({"extra": [1, 2]}, "params.extra", "must be an object"),
        ({"inputs": {"image": "in_nothex"}}, "params.inputs.image", "upload id"),
        ({"inputs": {"../x": "in_" + "0" * 32}}, "params.inputs.../x", "input name"),
        ({"inputs": {"image": "in_" + "0" * 32}}, "params.inputs.image", "no upload"),
        ({"lora": "x"}, "params.lora", "unknown field"),
    ]
    for params, field, words in cases:
        r = c.post("/v1/jobs", {"capability": "image.fast", "params": params})
        assert r.status == 400, (params, r)
        err = r.json()["error"]
        assert err["field"] == field and words in err["message"], (params, err)
    # An upload over max_input_bytes is refused before it is read, and not kept.
    r = c.post("/v1/inputs", b"x" * 70000, raw=True, headers={"Content-Type": "image/png"})
    assert r.status == 413, r
    assert r.json()["error"]["field"] == "body" and "65536" in r.json()["error"]["message"]
    r = c.post("/v1/inputs", b"", raw=True, headers={"Content-Type": "image/png"})
    assert r.status == 400 and r.json()["error"]["field"] == "body", r
    r = c.post("/v1/inputs", b"abc", raw=True, headers={"Content-Type": "nonsense"})
    assert r.status == 400 and r.json()["error"]["field"] == "Content-Type", r
    assert c.get("/v1/jobs").json()["jobs"] == []
    assert count_rows(head, "jobs") == 0 and count_rows(head, "inputs") == 0


def test_another_tenants_upload_is_refused(env):
    head, _, _ = env
    a = head.client(head.add_tenant("a"))
    b = head.client(head.add_tenant("b"))
    up = upload(a, tiny_png(seed=3))
    r = b.post("/v1/jobs", {"capability": "upscale", "params": {"inputs": {"image": up["id"]}}})
    assert r.status == 400, r
    assert r.json()["error"]["field"] == "params.inputs.image"
    assert b.get(f"/v1/inputs/{up['id']}").status == 404
    assert a.get(f"/v1/inputs/{up['id']}").json()["sha256"] == up["sha256"]
    assert b.get("/v1/jobs").json()["jobs"] == []
    # A worker token is not a tenant key: it cannot upload.
    w = head.client(head.add_worker_token("w"))
    assert w.post("/v1/inputs", b"abc", raw=True).status == 403


def test_kill9_after_the_201_loses_no_input(head_factory, tmp_path):
    head = head_factory(config_text=HEAD_CONFIG)
    c = head.client(head.add_tenant("acme"))
    img = tiny_png(24, 24, seed=9)
    up = upload(c, img)
    job = submit(c, {"capability": "upscale", "params": {"inputs": {"image": up["id"]}}})
    head.kill9()
    head.start()
    agent = Agent(head, tmp_path, "after").start()
    try:
        c = head.client(c.key)
        done = wait_job(c, job["id"], 40)
        assert done["state"] == "succeeded", done
        assert drawn_hash(c.get(f"/v1/jobs/{job['id']}/result").body) == fnv1a64(img)
    finally:
        agent.stop()


def test_unused_uploads_are_swept_and_named_ones_kept(head_factory):
    head = head_factory(config_text=HEAD_CONFIG + "input_unused_s = 1\n")
    c = head.client(head.add_tenant("acme"))
    lone = upload(c, tiny_png(seed=4))
    named = upload(c, tiny_png(seed=5))
    # No agent: the job stays queued and keeps its input.
    r = c.post("/v1/jobs", {"capability": "upscale", "params": {"inputs": {"image": named["id"]}}})
    assert r.status == 201, r
    wait_until(lambda: c.get(f"/v1/inputs/{lone['id']}").status == 404, 20,
               "the unused upload to be swept")
    assert c.get(f"/v1/inputs/{named['id']}").status == 200


def test_cli_submit_uploads_inputs_and_passes_params(env):
    head, make_agent, tmp = env
    record = os.path.join(str(tmp), "cli-runs.jsonl")
    agent = make_agent(gpus=1, runtime=f"{binary('gpuq-sim-runtime')} --scale 0.001 "
                                       f"--record {record}")
    agent.wait_ready()
    key = head.add_tenant("acme")
    img_path = os.path.join(str(tmp), "in.png")
    img = tiny_png(16, 16, seed=11)
    with open(img_path, "wb") as f:
        f.write(img)
    mask_path = os.path.join(str(tmp), "mask.png")
    with open(mask_path, "wb") as f:
        f.write(tiny_png(16, 16, seed=12))
    e = dict(os.environ, GPUQ_URL=head.url, GPUQ_KEY=key)
    out = subprocess.run([binary("gpuq"), "submit", "--capability", "upscale", "--input", f"image={img_path}",
                          "--input", f"mask={mask_path}",
                          "--param", "lora=pixel-art", "--param", "strength=0.5",
                          "--param", 'sampler={"name":"euler","steps":[1,2]}', "--param",
                          "steps=12", "--wait"],
                         env=e, capture_output=True, text=True, timeout=60, cwd=str(tmp))
    assert out.returncode == 0, out
    with open(record) as f:
        runs = [json.loads(line) for line in f if '"warmup":false' in line]
    assert len(runs) == 1, runs
    p = runs[0]["params"]
    assert p["steps"] == 12
    assert p["extra"] == {"lora": "pixel-art", "strength": 0.5,
                          "sampler": {"name": "euler", "steps": [1, 2]}}
    # The runtime got a local file in the agent's work directory, named by the input.
    assert sorted(p["inputs"]) == ["image", "mask"]
    for name, path in p["inputs"].items():
        assert path.startswith(os.path.join(agent.dir, "work", "inputs") + "/")
        assert path.endswith("/" + name)
    # The output reflects the image (the sim runtime's choice over the mask).
    job_id = runs[0]["id"].split(".")[0]
    r = head.client(key).get(f"/v1/jobs/{job_id}/result")
    assert drawn_hash(r.body) == fnv1a64(img)


def test_an_input_gone_before_the_agent_fetches_it_fails_the_job_bad_input(env):
    head, make_agent, _ = env
    c = head.client(head.add_tenant("acme"))
    up = upload(c, tiny_png(seed=21))
    job = submit(c, {"capability": "upscale", "params": {"inputs": {"image": up["id"]}}})
    # The upload disappears behind the head's back (as if swept in a race).
    db = sqlite3.connect(f"{head.data_dir}/gpuq.db", timeout=10)
    with db:
        db.execute("DELETE FROM inputs WHERE id = ?", (up["id"],))
    db.close()
    agent = make_agent(gpus=1)
    done = wait_job(c, job["id"], 30)
    assert done["state"] == "failed", done
    assert done["error"]["class"] == "bad_input" and "gone" in done["error"]["message"], done
    # Nothing of it is left in the agent's work directory.
    work = os.path.join(agent.dir, "work", "inputs")
    assert not os.path.isdir(work) or not os.listdir(work)
