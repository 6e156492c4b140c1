"""Strict input at the head's front door (issue 18, points 5, 6, 7 and the
event stream's tenant): path segments and query values decoded strictly (a
%00, invalid UTF-8 or a stray '%' is a 400 naming the segment, never a prefix
acted on), error bodies that are always valid JSON whatever the request
echoes, numbers beyond 64 bits or doubles refused naming their field, and the
job's tenant on the event stream. A real gpuqd on 127.0.0.1:0; raw sockets
where http.client would not send the bytes."""

import http.client
import json
import random
import socket

from gpuq_harness import SLOW

JOB = {"capability": "image.fast", "params": {"prompt": "a fox", "width": 512, "height": 512}}


def strict_json(body):
    """The body as JSON, refusing invalid UTF-8 (json.loads alone would guess)."""
    return json.loads(body.decode("utf-8", errors="strict"))


def raw(host, port, head_bytes, body=b""):
    """Sends one request as raw bytes; returns (status, headers dict, body)."""
    s = socket.create_connection((host, port), timeout=10 * SLOW)
    try:
        s.sendall(head_bytes + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, f"connection closed before an answer: {data[:200]!r}"
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower().decode()] = v.strip().decode()
        n = int(headers.get("content-length", "0"))
        while len(rest) < n:
            chunk = s.recv(65536)
            assert chunk, "connection closed inside the body"
            rest += chunk
        return status, headers, rest[:n]
    finally:
        s.close()


def raw_get(c, target, key=None):
    auth = f"Authorization: Bearer {key}\r\n".encode() if key else b""
    return raw(c.host, c.port,
               b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n" + auth + b"Connection: close\r\n\r\n")


def assert_error(r, status, field, why=None):
    assert r.status == status, r
    assert r.header("Content-Type") == "application/json", r
    err = strict_json(r.body)["error"]
    assert err["field"] == field, (r, err)
    if why:
        assert why in err["message"], err
    return err


def test_path_segments_are_decoded_strictly(head):
    key = head.add_tenant("acme")
    c = head.client(key)
    job = c.post("/v1/jobs", JOB).json()
    jid = job["id"]
    # A NUL cuts nothing short: neither the job nor its result is answered for a prefix.
    assert_error(c.get(f"/v1/jobs/{jid}%00junk"), 400, "id", "NUL")
    assert_error(c.get(f"/v1/jobs/{jid}%00/result"), 400, "id", "NUL")
    assert_error(c.get(f"/v1/jobs/{jid}%00/events"), 400, "id", "NUL")
    # ... and a cancel of "843%00" cancels nothing.
    assert_error(c.delete(f"/v1/jobs/{jid}%00"), 400, "id", "NUL")
    assert_error(c.delete(f"/v1/jobs/{jid}%00junk"), 400, "id", "NUL")
    assert c.get(f"/v1/jobs/{jid}").json()["state"] == "queued"
    # Invalid UTF-8, escaped or sent raw, and stray or short escapes.
    assert_error(c.get("/v1/jobs/%ff%fe"), 400, "id", "UTF-8")
    assert_error(c.get("/v1/jobs/%c0%af"), 400, "id", "UTF-8")  # an overlong '/'
    assert_error(c.get("/v1/jobs/%ed%a0%80"), 400, "id", "UTF-8")  # a surrogate
    for bad in ("%zz", "12%", "1%2", f"{jid}%", "%%31"):
        assert_error(c.get(f"/v1/jobs/{bad}"), 400, "id", "'%'")
    status, headers, body = raw_get(c, b"/v1/jobs/\xff\xfe", key)
    assert status == 400 and headers["content-type"] == "application/json"
    assert strict_json(body)["error"]["field"] == "id"
    # A control character decoded is refused too.
    assert_error(c.get(f"/v1/jobs/{jid}%0a"), 400, "id", "control")
    # Only a plain decimal id: no sign, space, leading zero, or number beyond 64 bits.
    for bad in (f"0{jid}", f"%20{jid}", f"{jid}%20", f"%2B{jid}", f"+{jid}", f"{jid}.0",
                "18446744073709551616", "0x1"):
        assert_error(c.get(f"/v1/jobs/{bad}"), 400, "id", "not a job id")
    # A well-formed escape is decoded: %3N is the digit N.
    enc = "".join("%3" + d for d in jid)
    r = c.get(f"/v1/jobs/{enc}")
    assert r.status == 200 and r.json()["id"] == jid, r
    # A bad segment that is not an id names the path; the admin's worker id names id.
    assert_error(c.get("/v1/jo%zzbs"), 400, "path", "'%'")
    assert_error(c.get("/v1/%ff/x"), 400, "path", "UTF-8")
    assert_error(head.admin().post("/v1/workers/gpu%000/drain"), 400, "id", "NUL")
    # Who may call is still asked first: no key, no 400 about the id.
    assert c.get(f"/v1/jobs/{jid}%00", key=None).status == 401
    # Nothing of it touched the job.
    assert c.get(f"/v1/jobs/{jid}").json()["state"] == "queued"


def test_query_values_are_decoded_strictly(head):
    key = head.add_tenant("acme")
    c = head.client(key)
    jid = c.post("/v1/jobs", JOB).json()["id"]
    assert_error(c.get("/v1/jobs?state=%ff"), 400, "state", "UTF-8")
    assert_error(c.get("/v1/jobs?state=queued%00x"), 400, "state", "NUL")
    assert_error(c.get("/v1/jobs?limit=5%"), 400, "limit", "'%'")
    assert_error(c.get("/v1/jobs?limit=1%00"), 400, "limit", "NUL")
    for bad in ("%2B5", "%205", "5%20", "1+2", "0x5", "5.0", "99999999999999999999"):
        assert_error(c.get(f"/v1/jobs?limit={bad}"), 400, "limit", "integer")
    assert_error(c.get(f"/v1/jobs/{jid}?wait=%zz"), 400, "wait")
    assert_error(c.get(f"/v1/jobs/{jid}?wait=1%00"), 400, "wait", "NUL")
    # Escapes that decode to plain text work.
    r = c.get("/v1/jobs?state=%71ueued&limit=%35")
    assert r.status == 200 and [j["id"] for j in r.json()["jobs"]] == [jid], r
    # The admin naming a tenant: "acme%00x" is not acme.
    admin = head.admin()
    assert_error(admin.get("/v1/jobs?tenant=acme%00x"), 400, "tenant", "NUL")
    assert admin.get("/v1/jobs?tenant=%61cme").json()["jobs"][0]["id"] == jid
    # An agent's worker_id and attempt.
    w = head.client(head.add_worker_token())
    assert_error(w.get("/v1/agent/assignments?worker_id=gpu%000&wait=0"), 400, "worker_id", "NUL")
    assert_error(w.get("/v1/agent/assignments?worker_id=%ff&wait=0"), 400, "worker_id", "UTF-8")
    r = w.request("POST", f"/v1/agent/jobs/{jid}/complete?worker_id=g&attempt=1%00",
                  body=b"x", raw=True, headers={"Content-Type": "image/png"})
    assert_error(r, 400, "attempt", "NUL")
    assert c.get(f"/v1/jobs/{jid}").json()["state"] == "queued"


NASTY_PATHS = [
    b"/v1/jobs/%ff%fe", b"/v1/jobs/\xff\xfe", b"/v1/jobs/\xc3", b"/v1/jobs/%22%5c%22",
    b"/v1/jobs/%e2%80%ae%22", b"/v1/jobs/a" + b"%c3%a9" * 30, b"/v1/jobs/a\"b\\c",
    b"/v1/jobs/\xe9\xe9\xe9", b"/v1/jobs?state=\xff", b"/v1/jobs?state=%22%7d",
    b"/v1/jobs?limit=%ff", b"/v1/jobs/1?wait=\xc3", b"/v1/nope/\xff", b"/v1/jobs/%00",
    b"/v1/jobs?tenant=x", b"/v1/workers/%c3/drain", b"/v1/jobs/1/%ff",
]

NASTY_BODIES = [
    b'{"capability":"\xff\xfe"}',
    b'{"\xff\xfe":1}',
    b'{"capability":"image.fast","\xc3":1}',
    b'{"' + "é".encode() * 40 + b'":1}',  # a key cut inside a character by the field's bound
    b'{"a\\"b\\\\c\\u0001\\u007f":1}',
    b'{"capability":"x' + "é".encode() * 40 + b'"}',  # echoed, cut at 63 bytes
    b'{"capability":"image.fast","model":"\\"}\\n"}',
    b'{"capability":"image.fast","params":{"\xe2\x80\xae":1}}',
    b'{"capability":"image.fast","params":{"fault":"\\ud800"}}',
    b'\xef\xbb\xbf{}', b'\xff', b'{"capability":', b'{"a":"\x01"}',
    b'{"capability":"image.fast","params":{"width":1e999,}}',
]


def test_error_bodies_are_always_valid_json(head):
    key = head.add_tenant("acme")
    c = head.client(key)
    admin = head.admin()
    answered = 0
    for path in NASTY_PATHS:
        for k in (key, head.admin_key, None):
            status, headers, body = raw_get(c, path, k)
            if status < 400:
                continue
            assert headers.get("content-type") == "application/json", (path, status, body)
            err = strict_json(body)["error"]
            assert err["code"] and err["message"], (path, body)
            answered += 1
    # Paths pieced together at random (a fixed seed) from the same kind of pieces.
    pieces = [b"%", b"%0", b"%00", b"%ff", b"\xff", b"\xc3", b"%c3", b"%a9", b"/", b"1", b"jobs",
              b"v1", b'"', b"\\", b"?", b"&", b"=", b"wait", b"state", b"+", b"%zz", b"%e2%80%ae",
              b"%0a", b"result", b"%2F", b"\xe2\x80", b"%7f"]
    rnd = random.Random(18)
    for _ in range(150):
        path = b"/v1/" + b"".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 8)))
        status, headers, body = raw_get(c, path, rnd.choice((key, head.admin_key)))
        if status >= 400:
            assert headers.get("content-type") == "application/json", (path, status, body)
            assert strict_json(body)["error"]["code"], (path, body)
    # An id echoed in its message is cut at 40 bytes, inside a character: U+FFFD, not a raw byte.
    status, _, body = raw_get(c, b"/v1/jobs/a" + b"%c3%a9" * 30, key)
    assert status == 400 and "\ufffd" in strict_json(body)["error"]["message"], body
    for body in NASTY_BODIES:
        r = c.request("POST", "/v1/jobs", body=body, raw=True,
                      headers={"Content-Type": "application/json"})
        assert r.status == 400, (body, r)
        err = strict_json(r.body)["error"]
        assert err["code"] in ("invalid_json", "invalid_field", "unknown_field"), (body, err)
        answered += 1
    # Admin names echoed back in a 404.
    r = admin.get("/v1/jobs?tenant=a" + "%c3%a9" * 40)
    assert r.status == 404 and strict_json(r.body)["error"]["field"] == "tenant", r
    assert c.get("/v1/jobs").json()["jobs"] == []
    assert answered >= len(NASTY_PATHS) + len(NASTY_BODIES)


def post_job(c, params, **extra):
    body = json.dumps({"capability": "image.fast", **extra})[:-1]
    body += ',"params":' + params + "}"
    return c.request("POST", "/v1/jobs", body=body.encode(), raw=True,
                     headers={"Content-Type": "application/json"})


def test_numbers_out_of_range_name_the_field(head):
    c = head.client(head.add_tenant("acme"))
    cases = [
        ('{"width":18446744073709551617}', "params.width"),  # 2^64 + 1
        ('{"width":-18446744073709551617}', "params.width"),
        ('{"width":9223372036854775808}', "params.width"),  # 2^63
        ('{"height":1e999}', "params.height"),
        ('{"height":-1E+999}', "params.height"),
        ('{"steps":-1e400}', "params.steps"),
        ('{"steps":1.5}', "params.steps"),
        ('{"frames":-1}', "params.frames"),
        ('{"frames":-0.5}', "params.frames"),
        ('{"width":512.0}', "params.width"),
        ('{"seed":18446744073709551616}', "params.seed"),
        ('{"guidance":1e999}', "params.guidance"),
        ('{"guidance":-1e999}', "params.guidance"),
        ('{"prompt":1e999}', "params.prompt"),
        ('{"prompt":"a","width":512,"height":99999999999999999999999999999}', "params.height"),
    ]
    for params, field in cases:
        err = assert_error(post_job(c, params), 400, field)
        assert err["code"] == "invalid_field", (params, err)
    for top, field in (('"deadline":1e400', "deadline"),
                       ('"timeout_s":99999999999999999999', "timeout_s")):
        body = '{"capability":"image.fast",' + top + "}"
        r = c.request("POST", "/v1/jobs", body=body.encode(), raw=True,
                      headers={"Content-Type": "application/json"})
        assert_error(r, 400, field)
    # What is not valid JSON stays refused as such.
    for body in (b'{"capability":"image.fast","params":{"width":1e999,}}',
                 b'{1e999:1}', b'{"capability":"image.fast","params":{"width":1e999 2}}',
                 b'{"capability":"image.fast","params":{"width":01e999}}'):
        r = c.request("POST", "/v1/jobs", body=body, raw=True,
                      headers={"Content-Type": "application/json"})
        assert_error(r, 400, "body")
        assert strict_json(r.body)["error"]["code"] == "invalid_json"
    assert c.get("/v1/jobs").json()["jobs"] == []
    # Numbers inside strings are text, untouched, even beside an overflow.
    prompt = 'say \\"1e999\\" 18446744073709551617'
    r = post_job(c, '{"prompt":"' + prompt + '","width":18446744073709551617}')
    assert_error(r, 400, "params.width")
    r = post_job(c, '{"prompt":"' + prompt + '","width":512}')
    assert r.status == 201, r
    assert r.json()["params"]["prompt"] == 'say "1e999" 18446744073709551617'
    # The agent's messages too: a heartbeat's telemetry and running list.
    w = head.client(head.add_worker_token())
    reg = {"protocol": 1, "worker_id": "gpu0", "gpu": {"name": "sim", "vram_total_mb": 24000},
           "capabilities": ["image.fast"]}
    assert w.post("/v1/agent/register", reg).status == 200
    for extra, field in (('"telemetry":{"temp_c":1e999}', "telemetry.temp_c"),
                         ('"telemetry":{"vram_used_mb":18446744073709551617}',
                          "telemetry.vram_used_mb"),
                         ('"running":[{"job_id":"1","attempt":18446744073709551617}]',
                          "running[0]")):
        body = '{"protocol":1,"worker_id":"gpu0",' + extra + "}"
        r = w.request("POST", "/v1/agent/heartbeat", body=body.encode(), raw=True,
                      headers={"Content-Type": "application/json"})
        assert_error(r, 400, field)


def read_event(r):
    data = None
    while True:
        line = r.fp.readline().decode()
        assert line, "stream ended early"
        line = line.rstrip("\n")
        if line.startswith("data: "):
            data = json.loads(line[6:])
        elif line == "" and data is not None:
            return data


def test_event_stream_shows_the_jobs_tenant(head):
    key = head.add_tenant("acme")
    c = head.client(key)
    job = c.post("/v1/jobs", JOB).json()
    assert job["tenant"] == "acme"
    for k in (key, head.admin_key):  # the tenant itself, and the admin watching it
        conn = http.client.HTTPConnection(c.host, c.port, timeout=20 * SLOW)
        conn.request("GET", f"/v1/jobs/{job['id']}/events", headers={"Authorization": f"Bearer {k}"})
        r = conn.getresponse()
        assert r.status == 200
        ev = read_event(r)
        assert ev["id"] == job["id"] and ev["tenant"] == "acme", ev
        conn.close()


def test_heartbeat_running_job_ids_are_strict(head):
    from gpuq_harness import FakeWorker
    w = FakeWorker(head, head.add_worker_token(), "gpu-strict").start()
    for bad in ("abc", "", "-5", "007", "99999999999999999999999"):
        r = w.c.post("/v1/agent/heartbeat", {"protocol": 1, "worker_id": w.id, "state": "ready",
                                              "running": [{"job_id": bad, "attempt": 1}]})
        assert_error(r, 400, "running[0]")
    assert w.heartbeat(running=[]).status == 200
