"""One of several client processes of the multi-client throughput phase
(gpuq_peer.py --tput-clients N): it connects and warms up like the shared
client's throughput phase, says so (a file in --mark-dir), waits for the
--go file so that all N start together, submits --n no-op jobs one call per
job as fast as it can, then observes every completion, and prints one JSON
line with the absolute times (time.perf_counter is CLOCK_MONOTONIC, one
clock for every process on the machine) so the parent can add the clients
up. Every wait is bounded by --seconds."""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("GPUQ_PEERS_DIR", ""))
sys.path.insert(0, HERE)

import client as peers_client  # noqa: E402  (the shared client)
import gpuq_client  # noqa: E402,F401  (adds the adapter "gpuq")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--ready-dir", default="")
    ap.add_argument("--mark-dir", required=True)
    ap.add_argument("--go", required=True)
    ap.add_argument("--seconds", type=float, default=60)
    a = ap.parse_args()
    now = time.perf_counter
    ad = peers_client.ADAPTERS[a.peer](a)
    if not ad.wait_ready(a.workers, now() + 30):
        print(json.dumps({"error": "workers not ready in 30 s"}))
        return 2
    for i in range(a.warmup):
        if not ad.wait(ad.submit(-1 - i), 30):
            print(json.dumps({"error": "warm-up job not completed"}))
            return 2
    with open(os.path.join(a.mark_dir, "ready.%d" % os.getpid()), "w") as f:
        f.write("1")
    end = now() + 60
    while not os.path.exists(a.go):
        if now() > end:
            print(json.dumps({"error": "no go in 60 s"}))
            return 2
        time.sleep(0.002)
    deadline = now() + a.seconds
    c0 = peers_client.cpu_s()
    t0 = now()
    handles = []
    for i in range(a.n):
        if (i & 255) == 0 and now() > deadline:
            break
        handles.append(ad.submit(i))
    t_sub = now()
    done, t_last = 0, t0
    for h in handles:
        rem = deadline - now()
        if rem <= 0 or not ad.wait(h, rem):
            break
        done += 1
        t_last = now()
    print(json.dumps({"n": a.n, "n_submitted": len(handles), "n_done": done, "t0": t0,
                      "t_sub": t_sub, "t_last": t_last, "client_cpu_s": peers_client.cpu_s() - c0,
                      "timed_out": now() > deadline}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
