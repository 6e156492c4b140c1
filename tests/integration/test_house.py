"""gpuqd's house rules end to end: one head per data directory, /readyz while
the store cannot write, and the route table (404, 405 with Allow, body limits
that depend on who is calling). Real gpuqd on 127.0.0.1:0 in a temp dir."""

import errno
import json
import os
import socket
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


def raw_request(url, head_text, body=b"", timeout=5):
    """Sends raw bytes; returns (status, headers dict, body) of the answer, read
    until the server closes or the announced length is in."""
    host, port = url.split("//")[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=timeout * SLOW)
    try:
        s.sendall(head_text.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, f"closed before an answer: {data!r}"
            data += chunk
        top, rest = data.split(b"\r\n\r\n", 1)
        lines = top.decode().split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
        n = int(hdrs.get("content-length", "0"))
        while len(rest) < n:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
        return status, hdrs, rest
    finally:
        s.close()


def test_route_table_404_405_allow(head):
    anon = head.client(None)
    admin = head.admin()
    for path in ("/v2/jobs", "/v1/nothing", "/v1/jobs/1/nothing", "/v1/agent/nothing",
                 "/healthz/x", "/v1/workers/w/drain/x"):
        r = admin.get(path)
        assert r.status == 404, (path, r)
        assert r.json()["error"]["code"] == "not_found", (path, r)
    # 404 and 405 come from the table, before authentication.
    assert anon.get("/v1/nothing").status == 404
    cases = {
        ("PUT", "/v1/jobs"): "POST, GET",
        ("PATCH", "/v1/jobs/7"): "GET, DELETE",
        ("POST", "/v1/jobs/7/result"): "GET",
        ("DELETE", "/v1/tenants"): "POST, GET",
        ("PUT", "/v1/worker-tokens"): "POST, GET",
        ("GET", "/v1/worker-tokens/3"): "DELETE",
        ("GET", "/v1/workers/w1/drain"): "POST",
        ("GET", "/v1/agent/jobs/7/complete"): "POST",
        ("POST", "/healthz"): "GET",
        ("DELETE", "/readyz"): "GET",
    }
    for (method, path), allow in cases.items():
        for c in (admin, anon):
            r = c.request(method, path)
            assert r.status == 405, (method, path, r)
            assert r.header("Allow") == allow, (method, path, r.headers)
            assert r.json()["error"]["code"] == "method_not_allowed"
    # The route's callers: 401 without a key, 403 with a key of another kind.
    tenant = head.client(head.add_tenant("acme"))
    worker = head.client(head.add_worker_token())
    assert anon.get("/v1/workers").status == 401
    assert tenant.get("/v1/tenants").status == 403
    assert worker.get("/v1/jobs").status == 403
    assert tenant.post("/v1/agent/register", {}).status == 403
    assert admin.post("/v1/workers/nope/drain").status == 404


def test_unauthenticated_body_is_refused_before_it_is_read(head):
    # A huge announced body and none sent: the answer must come without it.
    for auth in ("", "Authorization: Bearer gq_notakey000000000000000000000000\r\n"):
        status, _, body = raw_request(
            head.url,
            "POST /v1/agent/jobs/1/complete?worker_id=w&attempt=1 HTTP/1.1\r\n"
            "Host: x\r\nContent-Type: image/png\r\nContent-Length: 500000000\r\n" + auth + "\r\n")
        assert status == 401, body
        assert json.loads(body)["error"]["field"] == "Authorization"
    # A tenant is authenticated but may not send an output: 403, body unread.
    key = head.add_tenant("acme")
    status, _, body = raw_request(
        head.url,
        "POST /v1/agent/jobs/1/complete?worker_id=w&attempt=1 HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {key}\r\nContent-Length: 500000000\r\n\r\n")
    assert status == 403, body
    # Unknown routes and wrong methods neither read a body.
    status, hdrs, _ = raw_request(
        head.url, "PUT /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 500000000\r\n\r\n")
    assert status == 405 and hdrs["allow"] == "POST, GET"
    # An agent announcing more than the result limit: 413 at once, unread.
    token = head.add_worker_token()
    status, _, body = raw_request(
        head.url,
        "POST /v1/agent/jobs/1/complete?worker_id=w&attempt=1 HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: image/png\r\n"
        "Content-Length: 500000000\r\n\r\n")
    assert status == 413, body
    # A worker's result within the limit is read (and here refused: no such job).
    png = b"\x89PNG" + b"x" * 200000
    status, _, body = raw_request(
        head.url,
        "POST /v1/agent/jobs/1/complete?worker_id=w&attempt=1 HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: image/png\r\n"
        f"Content-Length: {len(png)}\r\n\r\n", png)
    assert status == 404, body
    # The JSON limit still holds for a tenant.
    status, _, _ = raw_request(
        head.url, f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
    assert status == 413
    assert head.client(None).get("/readyz").status == 200  # and it still serves


def test_admin_writes_answer_after_commit(head):
    """Tenant and worker-token adds answer through the committer (suspended
    connections): many at once all succeed, a taken name is 409, and each key
    works as soon as its 201 arrives."""
    import concurrent.futures
    admin_key = head.admin_key

    def add(i):
        c = head.client(admin_key)
        r = c.post("/v1/tenants", {"name": f"t{i}", "tier": "free"})
        assert r.status == 201, r
        key = r.json()["key"]
        assert head.client(key).post("/v1/jobs", JOB).status == 201
        w = c.post("/v1/worker-tokens", {"name": f"w{i}"})
        assert w.status == 201, w
        assert head.client(w.json()["token"]).get("/v1/agent/assignments").status == 400
        return key

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        keys = list(ex.map(add, range(24)))
    assert len(set(keys)) == 24
    r = head.admin().post("/v1/tenants", {"name": "t3"})
    assert r.status == 409 and r.json()["error"]["field"] == "name", r
    names = [t["name"] for t in head.admin().get("/v1/tenants").json()["tenants"]]
    assert sorted(names) == sorted(f"t{i}" for i in range(24))
