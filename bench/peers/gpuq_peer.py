"""gpuq as one more peer of the shared peers baseline (../shared/peers, read
only): the same phases, table and RSS accounting as redis/beanstalkd/celery,
with gpuqd as the server and one gpuq-agent with K simulated GPUs running the
sim runtime (zero-duration jobs) as the workers.

    bench/peers/run [--peers gpuq,beanstalkd,celery] [--modes durable] [bench.py flags]

It imports the shared bench.py and adds the peer "gpuq" to it: server and
worker commands here, the client adapter in gpuq_client.py. gpuqd has one
durability setting as shipped (SQLite WAL, synchronous=FULL, group commit),
so its "default" and "durable" modes are the same configuration.

Flags of this wrapper (the rest go to the shared bench.py):

  --tput-gpus K      simulated GPUs of gpuq's one agent in the throughput
                     phases (default 8; the other peers get --tput-workers
                     worker processes, the shared default 2)
  --tput-clients N   after the shared phases, a multi-client throughput phase
                     for gpuq, beanstalkd and redislist: N client processes
                     (mclient.py) start together and each submits --mc-n jobs
                     (default 2000) one call per job, then observes its
                     completions; jobs/s = all jobs completed / (last
                     completion - first submit), over all N. 0 (default): off
  --mc-workers K     worker processes of beanstalkd/redislist in that phase
                     (default: --tput-workers)

Environment: GPUQ_BUILD (default <repo>/build), PEERS_DIR (default
<repo>/../shared/peers), PEERS_RESULTS (default $TMPDIR/gpuq-peers-results),
GPUQ_PEER_CLIENT (lean, the default, or httplib: see gpuq_client.py),
GPUQ_PEER_ONE_REQUEST (1, the default: the latency phase submits with
POST /v1/jobs?wait=, one request a job; 0: submit, then GET until the end),
GPUQ_PEER_HEAD_CONFIG and GPUQ_PEER_AGENT_CONFIG (a configuration file given
to gpuqd and to the agent with --config, e.g. to measure one build with
sched_batch = true).
"""
import argparse
import http.client
import json
import os
import shutil
import subprocess
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
CLIENT = os.environ.get("GPUQ_PEER_CLIENT", "lean")


def own_args(argv):
    """Takes this wrapper's flags out of argv (the rest is bench.py's)."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--tput-gpus", type=int, default=8)
    ap.add_argument("--tput-clients", type=int, default=0)
    ap.add_argument("--mc-n", type=int, default=2000)
    ap.add_argument("--mc-workers", type=int, default=0)
    own, rest = ap.parse_known_args(argv)
    if own.tput_gpus < 1 or own.tput_clients < 0 or own.mc_n < 1 or own.mc_workers < 0:
        sys.exit("gpuq_peer: --tput-gpus and --mc-n must be >= 1, --tput-clients and "
                 "--mc-workers >= 0")
    return own, rest


OWN = None  # set in __main__


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


def commits(port, datadir):
    """gpuqd's store commits so far (gpuq_store_commit_seconds_count on its
    /metrics), or None."""
    with open(os.path.join(datadir, "admin.key")) as f:
        key = f.read().strip()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", "/metrics", headers={"Authorization": "Bearer " + key})
        r = c.getresponse()
        data = r.read().decode()
        if r.status != 200:
            return None
        for line in data.splitlines():
            if line.startswith("gpuq_store_commit_seconds_count"):
                return float(line.split()[-1])
    except OSError:
        return None
    finally:
        c.close()
    return None


def gpuq_server_spec(port, datadir, build=None):
    return [os.path.join(build or BUILD, "gpuqd"), "--listen", "127.0.0.1:%d" % port,
            "--data", datadir] + config_args("GPUQ_PEER_HEAD_CONFIG"), DURABILITY


def config_args(var):
    """--config FILE when the environment names one in var."""
    path = os.environ.get(var)
    return ["--config", os.path.abspath(path)] if path else []


def start_gpuqd(procs, port, datadir, name="server-gpuq", build=None):
    """Starts gpuqd on port and waits for its head.url; returns (process,
    None), or (process, why) when it did not come up. name: the process's
    name among procs' (its pid file); build: the build directory, if not
    GPUQ_BUILD's."""
    argv, _ = gpuq_server_spec(port, datadir, build)
    srv = procs.start(name, argv, os.path.join(datadir, "server.log"))
    url_file = os.path.join(datadir, "head.url")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not os.path.exists(url_file) and time.monotonic() < deadline \
            and srv.poll() is None:
        time.sleep(0.05)
    if not os.path.exists(url_file):
        return srv, "gpuqd not ready: " + bench.tail(os.path.join(datadir, "server.log"))
    return srv, None


def start_workers(procs, specs, datadir):
    """Starts each (name, argv, env) of specs, logging to datadir/NAME.log."""
    return [procs.start(name, argv, os.path.join(datadir, name + ".log"), env)
            for name, argv, env in specs]


def gpuq_worker_specs(k, port, ready_dir, tag, build=None):
    """One agent with k simulated GPUs (k workers); its token goes by env.
    build: the build directory, if not GPUQ_BUILD's."""
    datadir = os.path.dirname(ready_dir)
    token = admin_post(port, datadir, "/v1/worker-tokens", {"name": "peers-" + tag})["token"]
    env = dict(os.environ, GPUQ_WORKER_TOKEN=token)
    argv = [os.path.join(build or BUILD, "gpuq-agent"), "--head", "http://127.0.0.1:%d" % port,
            "--sim-gpus", str(k)] + config_args("GPUQ_PEER_AGENT_CONFIG")
    return [("gpuq-agent-%s" % tag, argv, env)]


def gpuq_run_client(port, phase, n, warmup, workers, ready_dir, seconds, log):
    argv = [bench.PY, os.path.join(HERE, "gpuq_client.py"), "--peer", "gpuq", "--port",
            str(port), "--phase", phase, "--n", str(n), "--warmup", str(warmup),
            "--workers", str(workers), "--ready-dir", ready_dir, "--seconds", str(seconds)]
    env = dict(os.environ, PYTHONPATH=PEERS_DIR, PYTHONDONTWRITEBYTECODE="1")
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
    srv, why = start_gpuqd(procs, port, datadir)
    try:
        if why:
            out["error"] = why
            return out
        c0 = commits(port, datadir)
        out["latency"] = bench.run_phase(procs, "gpuq", port, 1, "latency", datadir, dict(
            n=args.n_lat, warmup=args.warmup, seconds=args.lat_seconds))
        c1 = commits(port, datadir)
        la = out["latency"]
        if c0 is not None and c1 is not None and la.get("n_done"):
            # Includes the tenant's and worker token's few commits.
            la["commits_per_job"] = (c1 - c0) / (la["n_done"] + args.warmup)
        out["throughput"] = bench.run_phase(procs, "gpuq", port, OWN.tput_gpus,
                                            "throughput", datadir, dict(
                                                n=args.n_tput, warmup=20,
                                                seconds=args.tput_seconds))
        out["throughput"]["bound_s"] = args.tput_seconds
        if OWN.tput_clients:
            out["multi"] = run_multi(procs, "gpuq", port, OWN.tput_gpus, datadir, args)
        out["server_hwm_mib"] = (bench.proc_status(srv.pid, "VmHWM") or 0) / 1024.0
        out["server_rss_end_mib"] = (bench.proc_status(srv.pid, "VmRSS") or 0) / 1024.0
    finally:
        procs.stop(srv, timeout=30)
        out["data_dir_bytes"] = bench.dir_bytes(datadir)
        out["config_seconds"] = time.monotonic() - t_cfg
        if not args.keep:
            shutil.rmtree(datadir, ignore_errors=True)
    return out


def run_multi(procs, peer, port, k, datadir, args):
    """The multi-client throughput phase (see --tput-clients) on a running
    server: k workers, N client processes started together."""
    n_cl = OWN.tput_clients
    ready = os.path.join(datadir, "ready-multi")
    marks = os.path.join(datadir, "marks-multi")
    go = os.path.join(datadir, "go-multi")
    os.makedirs(ready)
    os.makedirs(marks)
    ws = start_workers(procs, bench.worker_specs(peer, k, port, ready, "multi"), datadir)
    env = dict(os.environ, PYTHONPATH=PEERS_DIR, PYTHONDONTWRITEBYTECODE="1")
    res = {"clients": n_cl, "workers": k, "n_per_client": OWN.mc_n}
    cl = []
    logs = []
    try:
        for i in range(n_cl):
            log = open(os.path.join(datadir, "client-multi-%d.log" % i), "wb")
            logs.append(log)
            cl.append(subprocess.Popen(
                [bench.PY, os.path.join(HERE, "mclient.py"), "--peer", peer, "--port",
                 str(port), "--n", str(OWN.mc_n), "--workers", str(k), "--ready-dir", ready,
                 "--mark-dir", marks, "--go", go, "--seconds", str(args.tput_seconds)],
                stdout=subprocess.PIPE, stderr=log, env=env, cwd=HERE))
        end = time.monotonic() + 90
        while len(os.listdir(marks)) < n_cl and time.monotonic() < end \
                and all(c.poll() is None for c in cl):
            time.sleep(0.05)
        with open(go, "w") as f:
            f.write("go")
        outs = []
        for c in cl:
            try:
                so, _ = c.communicate(timeout=args.tput_seconds + 120)
                outs.append(json.loads(so.decode().strip().splitlines()[-1]))
            except (subprocess.TimeoutExpired, IndexError, ValueError) as e:
                outs.append({"error": "client: %r" % e})
        errs = [o["error"] for o in outs if "error" in o]
        if errs:
            res["error"] = "; ".join(errs)[:300]
            return res
        t0 = min(o["t0"] for o in outs)
        t_last = max(o["t_last"] for o in outs)
        t_sub = max(o["t_sub"] for o in outs)
        done = sum(o["n_done"] for o in outs)
        sub = sum(o["n_submitted"] for o in outs)
        res.update({"n": n_cl * OWN.mc_n, "n_done": done, "n_submitted": sub,
                    "elapsed_s": t_last - t0,
                    "jobs_per_s": done / (t_last - t0) if t_last > t0 else None,
                    "submit_per_s": sub / (t_sub - t0) if t_sub > t0 else None,
                    "client_cpu_s": sum(o["client_cpu_s"] for o in outs),
                    "timed_out": any(o["timed_out"] for o in outs)})
        return res
    finally:
        for c in cl:
            if c.poll() is None:
                c.kill()
                c.wait(timeout=5)
        for log in logs:
            log.close()
        for w in ws:
            procs.stop(w)


def other_multi(procs, peer, mode, rep, rundir, args):
    """A fresh server of a shared peer for the multi-client phase."""
    datadir = os.path.join(rundir, "%s-%s-r%d-multi" % (peer, mode, rep))
    os.makedirs(datadir)
    base = args.beanstalk_port if peer == "beanstalkd" else args.redis_port
    port = bench.pick_port(base)
    argv, _ = bench.server_spec(peer, mode, port, datadir)
    srv = procs.start("server-%s-multi" % peer, argv, os.path.join(datadir, "server.log"))
    try:
        if not bench.wait_port(port, time.monotonic() + 10):
            return {"error": "server did not listen"}
        return run_multi(procs, peer, port, OWN.mc_workers or args.tput_workers, datadir, args)
    finally:
        procs.stop(srv, timeout=30)
        if not args.keep:
            shutil.rmtree(datadir, ignore_errors=True)


def ran(peer, args):
    if peer == "gpuq":
        return ("gpuqd + 1 gpuq-agent (latency: 1 sim GPU; throughput: %d sim GPUs), "
                "client %s" % (OWN.tput_gpus, CLIENT))
    return "%d worker processes in throughput (latency: 1)%s" % (
        args.tput_workers, ", %d in multi-client" % (OWN.mc_workers or args.tput_workers)
        if OWN.tput_clients else "")


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

    def config(procs, peer, mode, rep, rundir, args):
        if peer == "gpuq":
            out = gpuq_run_config(procs, mode, rep, rundir, args)
        else:
            out = run_config(procs, peer, mode, rep, rundir, args)
            if OWN.tput_clients and peer in ("beanstalkd", "redislist"):
                out["multi"] = other_multi(procs, peer, mode, rep, rundir, args)
        out["ran"] = ran(peer, args)
        return out
    bench.run_config = config

    table = bench.table

    def table_plus(results):
        cpj = ["%.2f" % o["latency"]["commits_per_job"] for o in results
               if o["peer"] == "gpuq" and (o.get("latency") or {}).get("commits_per_job")]
        lines = [table(results), ""]
        if cpj:
            lines += ["gpuq store commits per job in the latency phase: " + ", ".join(cpj), ""]
        lines += ["what each peer ran (wrapper flags: --tput-gpus %d "
                 "--tput-clients %d --mc-n %d --mc-workers %d; GPUQ_PEER_CLIENT=%s):" % (
                     OWN.tput_gpus, OWN.tput_clients, OWN.mc_n, OWN.mc_workers, CLIENT)]
        seen = set()
        for o in results:
            if o.get("ran") and o["peer"] not in seen:
                seen.add(o["peer"])
                lines.append("  %-10s %s" % (o["peer"], o["ran"]))
        multi = [o for o in results if o.get("multi")]
        if multi:
            lines += ["", "multi-client throughput: %d client processes started together, "
                      "%d jobs each, one call per job" % (OWN.tput_clients, OWN.mc_n),
                      "%-10s %-8s %-3s %7s %9s %11s %9s %10s" % (
                          "peer", "mode", "rep", "workers", "jobs/s", "done/N", "submit/s",
                          "client cpu")]
            for o in multi:
                m = o["multi"]
                if "error" in m:
                    lines.append("%-10s %-8s %-3s ! %s" % (o["peer"], o["mode"], o["rep"],
                                                            m["error"]))
                    continue
                lines.append("%-10s %-8s %-3s %7d %9s %11s %9s %9.1fs" % (
                    o["peer"], o["mode"], o["rep"], m["workers"],
                    bench.fmt(m.get("jobs_per_s"), "%.0f"),
                    "%d/%d%s" % (m["n_done"], m["n"], "*" if m.get("timed_out") else ""),
                    bench.fmt(m.get("submit_per_s"), "%.0f"), m["client_cpu_s"]))
        return "\n".join(lines)
    bench.table = table_plus
    if "gpuq" not in bench.PEERS:
        bench.PEERS.insert(0, "gpuq")


if __name__ == "__main__":
    for b in ("gpuqd", "gpuq-agent", "gpuq-sim-runtime"):
        if not os.access(os.path.join(BUILD, b), os.X_OK):
            sys.exit("gpuq_peer: %s/%s is missing (run make first)" % (BUILD, b))
    OWN, rest = own_args(sys.argv[1:])
    sys.argv[1:] = rest
    install()
    bench.main()
