"""gpuqd's house rules end to end: one head per data directory, /readyz while
the store cannot write, and the route table (404, 405 with Allow, body limits
that depend on who is calling). Real gpuqd on 127.0.0.1:0 in a temp dir."""

import errno
import os
import subprocess

import pytest

from gpuq_harness import SLOW, Head, binary, wait_until

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


def mount_tmpfs(path, size):
    """Mounts a small tmpfs at path; skips the test where that is not permitted."""
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount rights): "
                    f"{r.stderr.strip()}")


def fill(path):
    """Writes zeros into path until the filesystem is full."""
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    # Smaller writes take what is left.
    with open(path, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e


def test_readyz_fails_while_the_store_cannot_write(tmp_path):
    mnt = tmp_path / "small"
    mount_tmpfs(mnt, "8m")
    h = Head(mnt / "data")
    try:
        h.start()
        anon = h.client(None)
        c = h.client(h.add_tenant("acme"))
        assert c.post("/v1/jobs", JOB).status == 201
        assert anon.get("/readyz").status == 200

        filler = mnt / "filler"
        fill(filler)
        # No job is acknowledged that is not stored: every submit is 503, never 201.
        for _ in range(5):
            r = c.post("/v1/jobs", JOB)
            assert r.status == 503, r
        r = wait_until(lambda: (lambda r: r if r.status == 503 else None)(anon.get("/readyz")),
                       5, "/readyz to fail")
        err = r.json()["error"]
        assert err["code"] == "unavailable" and "store cannot write" in err["message"], r
        # It stays failed while the disk stays full (the probe keeps failing).
        r2 = wait_until(lambda: (lambda r: r if r.json()["error"]["message"] != err["message"]
                                 else None)(anon.get("/readyz")), 5, "/readyz to probe again")
        assert r2.status == 503, r2
        assert "store cannot write" in h.tail(), h.tail()

        os.unlink(filler)
        wait_until(lambda: anon.get("/readyz").status == 200, 10 * SLOW,
                   "/readyz to recover once space is free")
        r = c.post("/v1/jobs", JOB)
        assert r.status == 201, r
        job = r.json()
        assert c.get(f"/v1/jobs/{job['id']}").json()["state"] == "queued"
        assert h.proc.poll() is None  # the same head throughout
        # Exactly the acknowledged jobs exist: the refused ones left nothing behind.
        listed = c.get("/v1/jobs?limit=50").json()["jobs"]
        assert len(listed) == 2, listed
    finally:
        h.stop()
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
