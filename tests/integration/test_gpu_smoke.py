"""scripts/bundle and scripts/gpu-smoke without a GPU: the bundle carries the
binaries in the build's layout and every library they link but glibc's and
the driver's, and runs from there; gpu-smoke, run from the bundle with the
fake driver and NVML of tests/fakes standing in for the GPU, goes through
every part (the runtime's inline and file results, head and agent, 5 jobs,
the small-job figures) and says OK. What it cannot show is a real kernel on a
real GPU. Every wait is bounded."""

import os
import subprocess

import pytest

from gpuq_harness import BUILD, ROOT, SLOW

FAKES = os.path.join(BUILD, "tests", "fakes")
BINS = ["gpuqd", "gpuq", "gpuq-agent", "gpuq-cuda-runtime", "gpuq-sim-runtime",
        "bench/gpuq-loadgen", "bench/gpuq-bench-sqlite"]
GLIBC = ("libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "libresolv.so",
         "ld-linux")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "devrun"
    r = subprocess.run([os.path.join(ROOT, "scripts", "bundle"), BUILD, str(out)],
                       capture_output=True, text=True, timeout=120 * SLOW)
    assert r.returncode == 0, r.stderr
    return out


def test_bundle_carries_the_binaries_and_their_libraries(bundle):
    for b in BINS:
        assert os.access(bundle / b, os.X_OK), b
    libs = sorted(os.listdir(bundle / "lib"))
    assert "libjansson.so.4" in libs and "libmicrohttpd.so.12" in libs, libs
    assert not [x for x in libs if x.startswith(GLIBC)], libs
    assert not [x for x in libs if x.startswith(("libcuda", "libnvidia-ml"))], libs
    manifest = (bundle / "MANIFEST").read_text()
    assert "needs glibc: 2." in manifest and "\tgpuqd\n" in manifest
    env = dict(os.environ, LD_LIBRARY_PATH=str(bundle / "lib"))
    for b in BINS:
        # Every library a binary needs resolves, and those not glibc's from
        # the bundle.
        out = subprocess.run(["ldd", str(bundle / b)], capture_output=True, text=True,
                             env=env, timeout=30).stdout
        assert "not found" not in out, out
        for line in out.splitlines():
            name, _, path = line.strip().partition(" => ")
            if path and not name.startswith(GLIBC):
                assert path.startswith(str(bundle / "lib")), line
    r = subprocess.run([str(bundle / "gpuqd"), "--help"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 0 and "usage: gpuqd" in r.stdout, r.stderr


def test_gpu_smoke_from_the_bundle_with_the_fake_driver(bundle, tmp_path):
    if not os.path.exists(os.path.join(FAKES, "libcuda.so.1")):
        pytest.skip("the fake libcuda is not built")
    out = tmp_path / "out"
    env = dict(os.environ, LD_LIBRARY_PATH=f"{bundle / 'lib'}:{FAKES}", FAKE_NVML_GPUS="1",
               OUT=str(out), KEEP="0", TMPDIR=str(tmp_path))
    env.pop("GPUQ_RESULT_INLINE_MAX", None)
    env.pop("GPUQ_CUDA_LIBRARY", None)
    r = subprocess.run([os.path.join(ROOT, "scripts", "gpu-smoke"), str(bundle)],
                       capture_output=True, text=True, env=env, timeout=300 * SLOW)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-4000:]
    assert "64x64: inline" in log and "PNG 64x64" in log, log[-4000:]
    assert "1024x1024: file" in log, log[-4000:]
    assert "200 succeeded, 0 failed" in log and "500 succeeded" in log, log[-4000:]
    assert "gpu-smoke: OK" in log
    for n in range(1, 6):
        assert (out / f"smoke-{n}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "agent.log").exists() and (out / "gpuqd.log").exists()
