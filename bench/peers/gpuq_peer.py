"""gpuq as one more peer of the shared peers baseline (../shared/peers, read
only): the same phases, table and RSS accounting as redis/beanstalkd/celery,
with gpuqd as the server and one gpuq-agent with K simulated GPUs running the
sim runtime (zero-duration jobs) as the workers.

    bench/peers/run [--peers gpuq,beanstalkd,celery] [--modes durable] [bench.py flags]

It imports the shared bench.py and adds the peer "gpuq" to it: server and
worker commands here, the client adapter in gpuq_client.py. gpuqd has one
durability setting as shipped (SQLite WAL, synchronous=FULL, group commit),
so its "default" and "durable" modes are the same configuration.

Environment: GPUQ_BUILD (default <repo>/build), PEERS_DIR (default
<repo>/../shared/peers), PEERS_RESULTS (default $TMPDIR/gpuq-peers-results).
"""
import http.client
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEERS_DIR = os.path.abspath(os.environ.get("PEERS_DIR",
                                           os.path.join(ROOT, "..", "shared", "peers")))
BUILD = os.path.abspath(os.environ.get("GPUQ_BUILD", os.path.join(ROOT, "build")))
os.environ.setdefault("PEERS_RESULTS", os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                    "gpuq-peers-results"))
os.environ["GPUQ_PEERS_DIR"] = PEERS_DIR
sys.path.insert(0, PEERS_DIR)

import bench  # noqa: E402  (the shared orchestrator)

READY_TIMEOUT_S = 20
DURABILITY = "SQLite WAL synchronous=FULL, group commit"


def admin_post(port, datadir, path, body):
    with open(os.path.join(datadir, "admin.key")) as f:
        key = f.read().strip()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("POST", path, body=json.dumps(body),
                  headers={"Authorization": "Bearer " + key,
                           "Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 201:
            raise RuntimeError("POST %s: %d %s" % (path, r.status, data[:200]))
        return json.loads(data)
    finally:
        c.close()


def gpuq_server_spec(port, datadir):
    return [os.path.join(BUILD, "gpuqd"), "--listen", "127.0.0.1:%d" % port,
            "--data", datadir], DURABILITY


def gpuq_worker_specs(k, port, ready_dir, tag):
    """One agent with k simulated GPUs (k workers); its token goes by env."""
    datadir = os.path.dirname(ready_dir)
    token = admin_post(port, datadir, "/v1/worker-tokens", {"name": "peers-" + tag})["token"]
    env = dict(os.environ, GPUQ_WORKER_TOKEN=token)
    argv = [os.path.join(BUILD, "gpuq-agent"), "--head", "http://127.0.0.1:%d" % port,
            "--sim-gpus", str(k)]
    return [("gpuq-agent-%s" % tag, argv, env)]


def gpuq_run_client(port, phase, n, warmup, workers, ready_dir, seconds, log):
    argv = [bench.PY, os.path.join(HERE, "gpuq_client.py"), "--peer", "gpuq", "--port",
            str(port), "--phase", phase, "--n", str(n), "--warmup", str(warmup),
            "--workers", str(workers), "--ready-dir", ready_dir, "--seconds", str(seconds)]
    env = dict(os.environ, PYTHONPATH=PEERS_DIR, PYTHONDONTWRITEBYTECODE="1")
    import subprocess
    with open(log, "ab") as errf:
        try:
            cp = subprocess.run(argv, stdout=subprocess.PIPE, stderr=errf, env=env,
                                cwd=HERE, timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            return {"error": "client timed out"}
    lines = cp.stdout.decode().strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"error": "client rc=%d: %s" % (cp.returncode, bench.tail(log, 8))}


def gpuq_run_config(procs, mode, rep, rundir, args):
    datadir = os.path.join(rundir, "gpuq-%s-r%d" % (mode, rep))
    os.makedirs(datadir)
    port = bench.pick_port(args.redis_port + 200)
    argv, desc = gpuq_server_spec(port, datadir)
    out = {"peer": "gpuq", "mode": mode, "rep": rep, "durability": desc,
           "server_argv": argv, "port": port}
    t_cfg = time.monotonic()
    srv = procs.start("server-gpuq", argv, os.path.join(datadir, "server.log"))
    try:
        url_file = os.path.join(datadir, "head.url")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not os.path.exists(url_file) and time.monotonic() < deadline \
                and srv.poll() is None:
            time.sleep(0.05)
        if not os.path.exists(url_file):
            out["error"] = "gpuqd not ready: " + bench.tail(os.path.join(datadir, "server.log"))
            return out
        out["latency"] = bench.run_phase(procs, "gpuq", port, 1, "latency", datadir, dict(
            n=args.n_lat, warmup=args.warmup, seconds=args.lat_seconds))
        out["throughput"] = bench.run_phase(procs, "gpuq", port, args.tput_workers,
                                            "throughput", datadir, dict(
                                                n=args.n_tput, warmup=20,
                                                seconds=args.tput_seconds))
        out["throughput"]["bound_s"] = args.tput_seconds
        out["server_hwm_mib"] = (bench.proc_status(srv.pid, "VmHWM") or 0) / 1024.0
        out["server_rss_end_mib"] = (bench.proc_status(srv.pid, "VmRSS") or 0) / 1024.0
    finally:
        procs.stop(srv, timeout=30)
        out["data_dir_bytes"] = bench.dir_bytes(datadir)
        out["config_seconds"] = time.monotonic() - t_cfg
        if not args.keep:
            shutil.rmtree(datadir, ignore_errors=True)
    return out


def install():
    """Adds the peer "gpuq" to the shared orchestrator."""
    server_spec, worker_specs = bench.server_spec, bench.worker_specs
    run_client, run_config = bench.run_client, bench.run_config

    bench.server_spec = lambda peer, mode, port, datadir: (
        gpuq_server_spec(port, datadir) if peer == "gpuq"
        else server_spec(peer, mode, port, datadir))
    bench.worker_specs = lambda peer, k, port, ready_dir, tag: (
        gpuq_worker_specs(k, port, ready_dir, tag) if peer == "gpuq"
        else worker_specs(peer, k, port, ready_dir, tag))

    def client(peer, port, phase, n, warmup, workers, ready_dir, seconds, log):
        if peer == "gpuq":
            return gpuq_run_client(port, phase, n, warmup, workers, ready_dir, seconds, log)
        return run_client(peer, port, phase, n, warmup, workers, ready_dir, seconds, log)
    bench.run_client = client

    bench.run_config = lambda procs, peer, mode, rep, rundir, args: (
        gpuq_run_config(procs, mode, rep, rundir, args) if peer == "gpuq"
        else run_config(procs, peer, mode, rep, rundir, args))
    if "gpuq" not in bench.PEERS:
        bench.PEERS.insert(0, "gpuq")


if __name__ == "__main__":
    for b in ("gpuqd", "gpuq-agent", "gpuq-sim-runtime"):
        if not os.access(os.path.join(BUILD, b), os.X_OK):
            sys.exit("gpuq_peer: %s/%s is missing (run make first)" % (BUILD, b))
    install()
    bench.main()
