"""Parts of scripts/gpu-smoke that need to read binary frames or time things
(Python 3 standard library only; run with the machine's python3 and without
the carried LD_LIBRARY_PATH, which is for gpuq's own binaries).

  gpu_smoke.py runtime-inline RUNTIME OUTDIR
      gpuq-cuda-runtime alone with GPUQ_RESULT_INLINE_MAX=65536: a 64x64 run
      must answer inline (outputs[0].bytes, then exactly that many bytes: a
      valid 64x64 PNG) and write no file; a 1024x1024 run must answer with a
      path to a valid 1024x1024 PNG; then 20 small runs back to back for the
      runtime's own time per small result. $GPUQ_LIB, when set, becomes the
      runtime's LD_LIBRARY_PATH.
  gpu_smoke.py bench BUILD URL TENANT_KEY
      after the head and agent are up: 200 small jobs (64x64, 1 step) one at a
      time by one client (gpuq-loadgen --mode e2e --connections 1): submit to
      succeeded p50/p99; then 500 submitted back to back by one client
      (--mode submit) and the jobs/s until all 500 have ended, read from the
      head's /metrics; then the same with 16 connections, so that intake
      outruns the GPU and the rate is the dispatch path's.

Every wait is bounded; exit status 0 only when every check passed."""

import json
import os
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import zlib

SMALL = 65536


def png_size(data):
    """(width, height) of an 8-bit RGB PNG after checking its signature, every
    chunk's CRC, and that IDAT inflates to exactly the rows IHDR promises."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"not a PNG: starts {data[:8]!r}")
    off, idat, ihdr = 8, b"", None
    while off < len(data):
        n, kind = struct.unpack(">I4s", data[off:off + 8])
        body = data[off + 8:off + 8 + n]
        (crc,) = struct.unpack(">I", data[off + 8 + n:off + 12 + n])
        if len(body) != n or crc != zlib.crc32(kind + body):
            raise ValueError(f"PNG chunk {kind!r} at {off}: truncated or bad CRC")
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        off += 12 + n
        if kind == b"IEND":
            break
    if not ihdr or off != len(data):
        raise ValueError("PNG without IHDR, or bytes after IEND")
    w, h, depth, colour = ihdr[:4]
    if depth != 8 or colour != 2:
        raise ValueError(f"PNG is not 8-bit RGB: depth {depth}, colour type {colour}")
    if len(zlib.decompress(idat)) != h * (1 + 3 * w):
        raise ValueError("PNG's image data does not match its IHDR")
    return w, h


class Runtime:
    """The runtime on pipes; a reader thread splits stdout into messages (a
    line, or a result line and its inline bytes)."""

    def __init__(self, path, env):
        self.proc = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, start_new_session=True)
        self.msgs = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            raw = self.proc.stdout.readline()
            if not raw:
                break
            msg = json.loads(raw)
            outs = msg.get("outputs") if msg.get("type") == "result" else None
            if outs and isinstance(outs[0].get("bytes"), int):
                msg["_data"] = self.proc.stdout.read(outs[0]["bytes"])
            with self.cv:
                self.msgs.append(msg)
                self.cv.notify_all()
        with self.cv:
            self.msgs.append(None)
            self.cv.notify_all()

    def send(self, msg):
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def answer(self, rid, timeout_s):
        """The message for rid that is not progress; prints what it skips."""
        deadline = time.monotonic() + timeout_s
        with self.cv:
            while True:
                while not self.msgs:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"no answer to {rid} in {timeout_s} s")
                    self.cv.wait(left)
                msg = self.msgs.pop(0)
                if msg is None:
                    raise EOFError(f"the runtime closed stdout waiting for {rid}")
                if msg.get("id") == rid and msg["type"] != "progress":
                    return msg
                if msg["type"] != "progress":
                    print(f"<- {show(msg)}")

    def stop(self):
        try:
            self.send({"type": "shutdown"})
            self.proc.stdin.close()
            return self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            return self.proc.wait(timeout=10)


def show(msg):
    m = {k: v for k, v in msg.items() if k != "_data"}
    return json.dumps(m) + (f" + {len(msg['_data'])} bytes" if "_data" in msg else "")


def runtime_inline(runtime, outdir):
    env = dict(os.environ)
    env["GPUQ_RESULT_INLINE_MAX"] = str(SMALL)
    if os.environ.get("GPUQ_LIB"):
        env["LD_LIBRARY_PATH"] = os.environ["GPUQ_LIB"]
    os.makedirs(outdir, exist_ok=True)
    rt = Runtime(runtime, env)
    ok = True

    def run(rid, w, h, steps=20, seed=1):
        rt.send({"type": "run", "id": rid, "model": "probe", "capability": "image.fast",
                 "params": {"prompt": "gpu smoke inline", "width": w, "height": h,
                            "steps": steps, "seed": seed},
                 "output_dir": outdir, "warmup": False})
        return rt.answer(rid, 120)

    try:
        rt.send({"type": "ping", "id": "p0"})
        print(f"<- {show(rt.answer('p0', 60))}")
        rt.send({"type": "load", "id": "l1", "model": "probe", "vram_mb": 1024,
                 "load_ms": 1000})
        loaded = rt.answer("l1", 120)
        print(f"<- {show(loaded)}")
        if loaded["type"] != "loaded":
            print("gpu-smoke: the runtime could not load a model", file=sys.stderr)
            return 1

        small = run("inline.1", 64, 64)
        print(f"<- {show(small)}")
        data = small.get("_data")
        if small["type"] != "result" or data is None:
            print("gpu-smoke: FAIL: a 64x64 result did not come inline", file=sys.stderr)
            ok = False
        else:
            size = png_size(data)
            print(f"64x64: inline, {len(data)} bytes, PNG {size[0]}x{size[1]}")
            if size != (64, 64) or len(data) > SMALL:
                print("gpu-smoke: FAIL: the inline PNG is not 64x64", file=sys.stderr)
                ok = False
            with open(os.path.join(outdir, "inline-64.png"), "wb") as f:
                f.write(data)  # kept for a look; the runtime wrote no file
        if os.path.exists(os.path.join(outdir, "inline.1.png")):
            print("gpu-smoke: FAIL: the inline run also wrote a file", file=sys.stderr)
            ok = False

        big = run("file.1", 1024, 1024)
        print(f"<- {show(big)}")
        path = (big.get("outputs") or [{}])[0].get("path")
        if big["type"] != "result":
            print("gpu-smoke: FAIL: the 1024x1024 run failed", file=sys.stderr)
            ok = False
        elif path is None:
            n = len(big.get("_data", b""))
            print(f"gpu-smoke: FAIL: a 1024x1024 result came inline ({n} bytes)",
                  file=sys.stderr)
            ok = False
        else:
            with open(path, "rb") as f:
                data = f.read()
            size = png_size(data)
            print(f"1024x1024: file {path}, {len(data)} bytes, PNG {size[0]}x{size[1]}")
            if size != (1024, 1024) or len(data) <= SMALL:
                print("gpu-smoke: FAIL: the file is not a 1024x1024 PNG over 64 KiB",
                      file=sys.stderr)
                ok = False

        # The runtime's own cost of a small result: 20 runs, one at a time.
        walls, runs = [], []
        for i in range(20):
            t0 = time.monotonic()
            r = run(f"small.{i}", 64, 64, steps=1, seed=i)
            walls.append((time.monotonic() - t0) * 1000)
            if r["type"] != "result" or "_data" not in r:
                print(f"gpu-smoke: FAIL: small run {i}: {show(r)}", file=sys.stderr)
                ok = False
                break
            png_size(r["_data"])
            runs.append(r.get("run_ms", 0))
        if walls:
            print(f"20 runs 64x64 steps 1, inline, one at a time: wall p50 "
                  f"{statistics.median(walls):.2f} ms, max {max(walls):.2f} ms; "
                  f"runtime's run_ms p50 {statistics.median(runs)}")
    except (ValueError, TimeoutError, EOFError, OSError) as e:
        print(f"gpu-smoke: FAIL: {e}", file=sys.stderr)
        ok = False
    finally:
        rc = rt.stop()
        print(f"runtime exited with status {rc}")
    return 0 if ok else 1


def job_counts(url):
    """{"submitted": n, STATE: n, ...} from the head's /metrics: jobs accepted
    (gpuq_jobs_submitted_total) and jobs ended by state
    (gpuq_jobs_finished_total), each summed over its other labels."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {"submitted": 0.0}
    for line in text.splitlines():
        if line.startswith("gpuq_jobs_submitted_total"):
            out["submitted"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("gpuq_jobs_finished_total{"):
            labels, value = line.rsplit(" ", 1)
            state = labels.split('state="', 1)[1].split('"', 1)[0]
            out[state] = out.get(state, 0) + float(value)
    return out


def loadgen(build, args, timeout_s):
    env = dict(os.environ)
    if os.environ.get("GPUQ_LIB"):
        env["LD_LIBRARY_PATH"] = os.environ["GPUQ_LIB"]
    r = subprocess.run([os.path.join(build, "bench", "gpuq-loadgen")] + args + ["--kv"],
                       capture_output=True, text=True, env=env, timeout=timeout_s)
    kv = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    if r.returncode != 0:
        print(f"gpu-smoke: gpuq-loadgen exited {r.returncode}: {r.stderr.strip()}",
              file=sys.stderr)
    return kv


def burst(build, url, common, total, conns):
    """total jobs submitted back to back by conns connections, then until all
    have ended; the counts from /metrics are exact even when a connection's
    last submit was in flight as the load generator stopped."""
    who = "one client" if conns == 1 else f"one client on {conns} connections"
    print(f"{total} jobs 64x64, 1 step, submitted back to back by {who}, "
          f"then until all have ended:")
    before = job_counts(url)
    t0 = time.monotonic()
    kv = loadgen(build, common + ["--mode", "submit", "--connections", str(conns),
                                  "--warmup", "0", "--duration", "30",
                                  "--max-jobs", str(total)], 60)
    t_sub = time.monotonic() - t0
    submitted = int(job_counts(url)["submitted"] - before["submitted"])
    print(f"  {submitted} accepted in {t_sub:.2f} s ({kv.get('submits_per_s')}/s, submit p50 "
          f"{kv.get('submit_p50_ms')} ms, p99 {kv.get('submit_p99_ms')} ms), "
          f"{kv.get('submits_refused')} refused")
    if kv.get("last_error"):
        print(f"  last error: {kv['last_error']}")
    deadline = t0 + 45
    while True:
        now = job_counts(url)
        submitted = int(now["submitted"] - before["submitted"])  # late commits too
        ended = {s: now[s] - before.get(s, 0) for s in now if s != "submitted"}
        done = sum(ended.values())
        if done >= submitted or time.monotonic() > deadline:
            break
        time.sleep(0.02)  # a poll of /metrics for a figure, not a test's synchronisation
    t_all = time.monotonic() - t0
    states = ", ".join(f"{int(v)} {s}" for s, v in sorted(ended.items()) if v)
    if submitted != total:
        print(f"  ({submitted} accepted in all: submits in flight as the load generator "
              f"stopped were committed too)")
    print(f"  all ended after {t_all:.2f} s ({t_all - t_sub:+.2f} s after the last accept): "
          f"{states or 'none'}; {done / t_all:.1f} jobs/s from the first submit to the last end")
    if t_all - t_sub < 0.1 * t_all:
        print("  (the jobs kept up with the submitting client: this rate is its submit rate)")
    if submitted < total or ended.get("succeeded", 0) < submitted:
        print(f"gpu-smoke: FAIL: not every one of the {total} back-to-back jobs succeeded "
              f"in 45 s", file=sys.stderr)
        return False
    return True


def bench(build, url, key):
    body = json.dumps({"capability": "image.fast", "model": "image-v2",
                       "params": {"prompt": "gpu smoke small", "width": 64, "height": 64,
                                  "steps": 1, "seed": 7}})
    common = ["--url", url, "--key", key, "--body", body]
    ok = True

    print("200 jobs 64x64, 1 step, one at a time by one client (submit, then wait):")
    kv = loadgen(build, common + ["--mode", "e2e", "--connections", "1", "--warmup", "0",
                                  "--duration", "40", "--max-jobs", "200"], 60)
    n = int(kv.get("jobs_succeeded", 0))
    print(f"  {n} succeeded, {kv.get('jobs_failed')} failed in {kv.get('window_s')} s "
          f"({kv.get('jobs_per_s')} jobs/s); submit->succeeded p50 {kv.get('e2e_p50_ms')} ms, "
          f"p99 {kv.get('e2e_p99_ms')} ms; submit p50 {kv.get('submit_p50_ms')} ms")
    if kv.get("last_error"):
        print(f"  last error: {kv['last_error']}")
    if n < 200:
        print("gpu-smoke: FAIL: fewer than 200 small jobs succeeded", file=sys.stderr)
        ok = False

    for conns in (1, 16):
        ok = burst(build, url, common, 500, conns) and ok
    return 0 if ok else 1


def main(argv):
    if len(argv) == 4 and argv[1] == "runtime-inline":
        return runtime_inline(argv[2], argv[3])
    if len(argv) == 5 and argv[1] == "bench":
        return bench(argv[2], argv[3], argv[4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
