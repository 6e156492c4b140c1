"""gpuqd's house rules end to end: one head per data directory, /readyz while
the store cannot write, and the route table (404, 405 with Allow, body limits
that depend on who is calling). Real gpuqd on 127.0.0.1:0 in a temp dir."""

import os
import socket
import subprocess

from gpuq_harness import SLOW, binary

JOB = {"capability": "image.fast", "params": {"prompt": "a fox", "width": 512, "height": 512}}


def snapshot(data_dir, skip=("gpuqd.log",)):
    """Every file of the directory with its inode, size, mtime and content hash."""
    out = {}
    for name in sorted(os.listdir(data_dir)):
        if name in skip:
            continue
        p = os.path.join(data_dir, name)
        st = os.stat(p)
        with open(p, "rb") as f:
            out[name] = (st.st_ino, st.st_size, st.st_mtime_ns, hash(f.read()))
    return out


def test_second_head_on_same_data_dir_exits_and_touches_nothing(head, tmp_path):
    c = head.client(head.add_tenant("acme"))
    first = c.post("/v1/jobs", JOB)
    assert first.status == 201, first
    before = snapshot(head.data_dir)
    assert "lock" in before and "head.url" in before and "gpuq.db" in before

    log = tmp_path / "second.log"
    with open(log, "wb") as f:
        second = subprocess.run(
            [binary("gpuqd"), "--listen", "127.0.0.1:0", "--data", head.data_dir],
            stdout=f, stderr=f, timeout=20 * SLOW)
    text = log.read_text()
    assert second.returncode != 0, text
    assert head.data_dir in text, text
    assert f"pid {head.proc.pid}" in text, text
    assert "in use" in text, text

    assert snapshot(head.data_dir) == before
    # The first head still serves, and its job is as it was.
    r = c.get(f"/v1/jobs/{first.json()['id']}")
    assert r.status == 200 and r.json()["state"] == "queued", r
    assert c.post("/v1/jobs", JOB).status == 201
    assert head.client(None).get("/readyz").status == 200


def test_data_dir_lock_is_released_at_exit(head_factory):
    h = head_factory()
    assert h.stop() == 0
    h.start()  # the same directory, at once: the lock went with the process
    assert h.client(None).get("/readyz").status == 200
    h.kill9()
    h.start()  # after kill -9 too
    assert h.client(None).get("/readyz").status == 200
