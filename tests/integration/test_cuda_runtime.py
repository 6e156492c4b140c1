"""gpuq-cuda-runtime without a GPU: the runtime must still speak protocol v1
(hello, pong, shutdown) and answer every load and run with an error of class
"cuda" that says why, so that the agent reports a missing driver cleanly.
CUDA itself is not exercised here (CI has no GPU; scripts/gpu-smoke does that
on a machine with one). Every wait is bounded."""

import ctypes
import json
import os
import queue
import shutil
import subprocess
import threading
import time

import pytest

from gpuq_harness import SLOW, binary

RUNTIME = binary("gpuq-cuda-runtime")


class Runtime:
    """gpuq-cuda-runtime on pipes; a reader thread queues its stdout lines."""

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
        for raw in self.proc.stdout:
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
        assert raw.endswith(b"\n")
        msg = json.loads(raw)
        assert isinstance(msg, dict) and isinstance(msg.get("type"), str), raw
        return msg

    def answer(self, req_id, timeout_s=10):
        """The next message answering req_id, skipping log lines."""
        deadline = time.monotonic() + timeout_s * SLOW
        while True:
            msg = self.recv(max(deadline - time.monotonic(), 0.01) / SLOW)
            if msg["type"] == "log":
                assert msg.get("level") in ("debug", "info", "warn", "error"), msg
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
