"""gpuq-cuda-runtime without a GPU: the runtime must still speak protocol v1
(hello, pong, shutdown) and answer every load and run with an error of class
"cuda" that says why, so that the agent reports a missing driver cleanly.
With the fake driver (tests/fakes/fake_cuda.c, through $GPUQ_CUDA_LIBRARY)
the rest of the runtime runs too: small results come inline, framed by their
length, large ones as files, and a pong never lands inside a picture. Real
kernels are not exercised here (CI has no GPU; scripts/gpu-smoke does that on
a machine with one). Every wait is bounded."""

import ctypes
import json
import os
import queue
import shutil
import subprocess
import struct
import threading
import time
import zlib

import pytest

from gpuq_harness import BUILD, SLOW, binary

RUNTIME = binary("gpuq-cuda-runtime")
FAKE_CUDA = os.path.join(BUILD, "tests", "fakes", "libcuda.so.1")


class Runtime:
    """gpuq-cuda-runtime on pipes; a reader thread queues its stdout messages:
    lines, and for a result with "bytes" the line and exactly those bytes."""

    def __init__(self, env_extra, tmp_path):
        env = dict(os.environ)
        env.pop("GPUQ_CUDA_LIBRARY", None)
        env.update(env_extra)
        self.stderr_path = os.path.join(str(tmp_path), "runtime.stderr")
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([RUNTIME], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env, start_new_session=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            raw = self.proc.stdout.readline()
            if not raw:
                break
            try:
                msg = json.loads(raw)
                n = msg["outputs"][0]["bytes"] if msg.get("type") == "result" else None
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                n = None
            if isinstance(n, int):
                raw = (raw, self.proc.stdout.read(n))
            self.lines.put(raw)
        self.lines.put(None)

    def send(self, msg):
        data = msg if isinstance(msg, bytes) else (json.dumps(msg) + "\n").encode()
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def recv(self, timeout_s=10):
        """The next line as JSON (every stdout line must be one JSON object)."""
        try:
            raw = self.lines.get(timeout=timeout_s * SLOW)
        except queue.Empty:
            raise AssertionError(f"no line from the runtime within {timeout_s * SLOW:.0f}s")
        assert raw is not None, f"runtime closed stdout: {self.stderr_tail()}"
        raw, data = raw if isinstance(raw, tuple) else (raw, None)
        assert raw.endswith(b"\n")
        msg = json.loads(raw)
        assert isinstance(msg, dict) and isinstance(msg.get("type"), str), raw
        if data is not None:
            msg["data"] = data  # the inline result's bytes
        return msg

    def answer(self, req_id, timeout_s=10):
        """The next message answering req_id, skipping log lines and its
        progress."""
        deadline = time.monotonic() + timeout_s * SLOW
        while True:
            msg = self.recv(max(deadline - time.monotonic(), 0.01) / SLOW)
            if msg["type"] == "log":
                assert msg.get("level") in ("debug", "info", "warn", "error"), msg
                continue
            if msg["type"] == "progress" and msg.get("id") == req_id:
                assert 0 < msg["progress"] < 1, msg
                continue
            if msg.get("id") == req_id:
                return msg
            raise AssertionError(f"unexpected message while waiting for {req_id}: {msg}")

    def stderr_tail(self):
        self.stderr.flush()
        with open(self.stderr_path, "rb") as f:
            return f.read()[-2000:].decode(errors="replace")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.stderr.close()


@pytest.fixture
def start_runtime(tmp_path):
    started = []

    def start(env_extra):
        rt = Runtime(env_extra, tmp_path)
        started.append(rt)
        return rt

    yield start
    for rt in started:
        rt.kill()


def libcuda_on_system():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def check_without_cuda(rt, tmp_path):
    hello = rt.recv()
    assert hello == {"type": "hello", "protocol": 1, "runtime": "gpuq-cuda-runtime",
                     "version": hello["version"]}, hello

    rt.send({"type": "ping", "id": "p1"})
    assert rt.answer("p1") == {"type": "pong", "id": "p1"}

    rt.send({"type": "load", "id": "l1", "model": "image-v2", "vram_mb": 8000, "load_ms": 1000})
    err = rt.answer("l1")
    assert err["type"] == "error" and err["class"] == "cuda", err
    assert "libcuda" in err["message"], err

    # Still alive and well-behaved after the failure: garbage is logged and
    # skipped, a run fails the same way, unload and unknown cancels are harmless.
    rt.send(b"this is not json\n")
    rt.send({"type": "cancel", "id": "no-such-job"})
    out = tmp_path / "out"
    out.mkdir()
    rt.send({"type": "run", "id": "42.1", "model": "image-v2", "capability": "image.fast",
             "params": {"prompt": "a fox", "width": 256, "height": 256, "steps": 1},
             "output_dir": str(out), "warmup": False})
    err = rt.answer("42.1")
    assert err["type"] == "error" and err["class"] == "cuda" and "libcuda" in err["message"], err
    assert list(out.iterdir()) == []
    rt.send({"type": "unload", "id": "u1", "model": "image-v2"})
    assert rt.answer("u1") == {"type": "unloaded", "id": "u1", "model": "image-v2"}
    rt.send({"type": "ping", "id": "p2"})
    assert rt.answer("p2") == {"type": "pong", "id": "p2"}

    rt.send({"type": "shutdown"})
    assert rt.proc.wait(timeout=5 * SLOW) == 0, rt.stderr_tail()


def test_cuda_runtime_without_libcuda_on_the_library_path(start_runtime, tmp_path):
    if libcuda_on_system():
        pytest.skip("this machine has libcuda.so.1 in the loader's cache: "
                    "LD_LIBRARY_PATH cannot hide it")
    empty = tmp_path / "no-libs"
    empty.mkdir()
    check_without_cuda(start_runtime({"LD_LIBRARY_PATH": str(empty)}), tmp_path)


def test_cuda_runtime_with_a_missing_cuda_library(start_runtime, tmp_path):
    # The same on any machine, GPU or not: point the runtime at a library that
    # does not exist.
    missing = tmp_path / "nowhere" / "libcuda.so.1"
    check_without_cuda(start_runtime({"GPUQ_CUDA_LIBRARY": str(missing)}), tmp_path)


def test_cuda_runtime_exits_on_stdin_eof(start_runtime, tmp_path):
    rt = start_runtime({"GPUQ_CUDA_LIBRARY": str(tmp_path / "libcuda.so.1")})
    assert rt.recv()["type"] == "hello"
    rt.proc.stdin.close()
    assert rt.proc.wait(timeout=5 * SLOW) == 0


def test_cuda_runtime_kernel_ptx_assembles(tmp_path):
    """The hand-written PTX, checked with ptxas where a CUDA toolkit is
    installed (it is not needed to build or run the runtime)."""
    ptx = subprocess.run([RUNTIME, "--ptx"], capture_output=True, check=True, timeout=10).stdout
    assert b".entry gpuq_julia(" in ptx and b".address_size 64" in ptx
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if not os.access(ptxas, os.X_OK):
        pytest.skip("no ptxas (CUDA toolkit) on this machine")
    src = tmp_path / "julia.ptx"
    src.write_bytes(ptx)
    r = subprocess.run([ptxas, "--gpu-name", "sm_75", "-o", str(tmp_path / "julia.cubin"),
                        str(src)], capture_output=True, timeout=60 * SLOW)
    assert r.returncode == 0, r.stderr.decode(errors="replace")


def png_info(data):
    """(width, height) of an 8-bit RGB PNG, after checking its signature, its
    chunks' CRCs and that its IDAT inflates to exactly the rows IHDR says."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    off, idat, ihdr = 8, b"", None
    while off < len(data):
        n, kind = struct.unpack(">I4s", data[off:off + 8])
        body = data[off + 8:off + 8 + n]
        assert len(body) == n
        assert struct.unpack(">I", data[off + 8 + n:off + 12 + n])[0] == zlib.crc32(kind + body)
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        off += 12 + n
        if kind == b"IEND":
            break
    assert off == len(data) and ihdr, "PNG without IHDR or with bytes after IEND"
    w, h, depth, colour = ihdr[:4]
    assert depth == 8 and colour == 2, ihdr  # 8-bit RGB
    assert len(zlib.decompress(idat)) == h * (1 + 3 * w)
    return w, h


def fake_driver_env(**extra):
    if not os.path.exists(FAKE_CUDA):
        pytest.skip(f"{FAKE_CUDA} not built")
    env = {"GPUQ_CUDA_LIBRARY": FAKE_CUDA, "FAKE_CUDA_MEM_MB": "16384"}
    env.update(extra)
    return env


def run_msg(rid, out, w, h, seed=1):
    return {"type": "run", "id": rid, "model": "image-v2", "capability": "image.fast",
            "params": {"prompt": "a fox", "width": w, "height": h, "steps": 1, "seed": seed},
            "output_dir": str(out), "warmup": False}


def test_cuda_runtime_answers_small_results_inline_and_large_ones_in_files(start_runtime,
                                                                          tmp_path):
    rt = start_runtime(fake_driver_env(GPUQ_RESULT_INLINE_MAX="65536"))
    assert rt.recv()["type"] == "hello"
    rt.send({"type": "load", "id": "l1", "model": "image-v2", "vram_mb": 8000, "load_ms": 1000})
    loaded = rt.answer("l1")
    assert loaded["type"] == "loaded" and loaded["vram_mb"] == 8000, loaded
    out = tmp_path / "out"
    out.mkdir()

    rt.send(run_msg("1.1", out, 64, 64))
    res = rt.answer("1.1")
    assert res["type"] == "result", res
    [o] = res["outputs"]
    assert o["content_type"] == "image/png" and "path" not in o, o
    assert o["bytes"] == len(res["data"]) <= 65536
    assert png_info(res["data"]) == (64, 64)
    assert list(out.iterdir()) == []  # nothing went through a file

    rt.send(run_msg("2.1", out, 1024, 1024))
    res = rt.answer("2.1", timeout_s=30)
    assert res["type"] == "result" and "data" not in res, res
    [o] = res["outputs"]
    assert o["content_type"] == "image/png" and o["path"] == str(out / "2.1.png"), o
    data = (out / "2.1.png").read_bytes()
    assert len(data) > 65536
    assert png_info(data) == (1024, 1024)
    assert sorted(p.name for p in out.iterdir()) == ["2.1.png"]  # no temporary left

    # Still well framed after both: the next line is a pong.
    rt.send({"type": "ping", "id": "p1"})
    assert rt.answer("p1") == {"type": "pong", "id": "p1"}
    rt.send({"type": "shutdown"})
    assert rt.proc.wait(timeout=5 * SLOW) == 0, rt.stderr_tail()


def test_cuda_runtime_without_an_inline_offer_writes_files(start_runtime, tmp_path):
    env = fake_driver_env()
    env["GPUQ_RESULT_INLINE_MAX"] = ""  # an older agent: no offer
    rt = start_runtime(env)
    assert rt.recv()["type"] == "hello"
    out = tmp_path / "out"
    out.mkdir()
    rt.send(run_msg("3.1", out, 64, 64))
    res = rt.answer("3.1", timeout_s=30)
    assert res["type"] == "result" and "data" not in res, res
    assert res["outputs"][0]["path"] == str(out / "3.1.png")
    assert png_info((out / "3.1.png").read_bytes()) == (64, 64)
    rt.send({"type": "shutdown"})
    assert rt.proc.wait(timeout=5 * SLOW) == 0, rt.stderr_tail()


def test_cuda_runtime_pongs_never_land_inside_an_inline_picture(start_runtime, tmp_path):
    """Pings answered by the main thread while the CUDA thread writes inline
    results: every message must stay whole (the reader would otherwise find a
    pong's bytes inside a PNG, or PNG bytes where a line should be). Without
    the stdout lock around the inline write this failed 3 runs in 3."""
    rt = start_runtime(fake_driver_env(GPUQ_RESULT_INLINE_MAX="65536"))
    assert rt.recv()["type"] == "hello"
    out = tmp_path / "out"
    out.mkdir()
    runs, pings = 200, 4000
    for i in range(runs):
        rt.send(run_msg(f"r{i}", out, 64, 64, seed=i))
        for j in range(pings // runs):
            rt.send({"type": "ping", "id": f"p{i}.{j}"})
    results, pongs = {}, 0
    deadline = time.monotonic() + 60 * SLOW
    while len(results) < runs or pongs < pings:
        msg = rt.recv(max(deadline - time.monotonic(), 0.01) / SLOW)
        if msg["type"] == "pong":
            pongs += 1
        elif msg["type"] == "result":
            assert png_info(msg["data"]) == (64, 64), msg["id"]
            results[msg["id"]] = msg["data"]
        else:
            assert msg["type"] in ("log", "progress", "loaded"), msg
    assert sorted(results) == sorted(f"r{i}" for i in range(runs))
    assert len(set(results.values())) == runs  # each seed its own picture
    assert list(out.iterdir()) == []
    rt.send({"type": "shutdown"})
    assert rt.proc.wait(timeout=5 * SLOW) == 0, rt.stderr_tail()
