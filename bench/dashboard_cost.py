#!/usr/bin/env python3
"""dashboard_cost.py DATA_DIR [--window S] [--shot PATH]: what one connected
dashboard costs the head. Runs against a head started by `make up` (its data
directory gives the URL, keys and gpuqd's pid), keeps every GPU busy with
jobs from the local tenant, then measures gpuqd's CPU time (utime + stime
from /proc/PID/stat) over a window without a dashboard and over a window with
one headless chromium showing the dashboard (driven by
tests/integration/cdp.py),
and prints both and their difference. --shot saves the dashboard as it was
at the end of the second window. Not a test: it prints figures only."""

import argparse
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from cdp import Chromium  # noqa: E402  (the browser driver the tests use)


def read(path):
    with open(path) as f:
        return f.read().strip()


def call(url, key, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Authorization": f"Bearer {key}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, None


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def feeder(url, tenant, caps, stop):
    """Keeps five jobs queued per capability so that every GPU stays busy."""
    while not stop.is_set():
        _, v = call(url + "/v1/fleet", tenant)
        queued = {q["capability"]: q["queued"] for q in (v or {}).get("queues", [])}
        for cap in caps:
            for _ in range(5 - queued.get(cap, 0)):
                call(url + "/v1/jobs", tenant, "POST",
                     {"capability": cap, "params": {"prompt": "bench", "width": 512,
                                                    "height": 512,
                                                    "sim_ms": random.randint(3000, 9000)}})
        stop.wait(1.0)


def measure(pid, window):
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(window)
    return (cpu_s(pid) - c0) / (time.monotonic() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--window", type=float, default=30)
    ap.add_argument("--shot")
    a = ap.parse_args()
    url = read(os.path.join(a.data, "head.url"))
    admin = read(os.path.join(a.data, "admin.key"))
    tenant = read(os.path.join(a.data, "tenant-local.key"))
    pid = int("".join(ch for ch in read(os.path.join(a.data, "lock")) if ch.isdigit()))
    _, w = call(url + "/v1/workers", admin)
    gpus = [x["id"] for x in w["workers"]]
    caps = sorted({c for x in w["workers"] for c in x["capabilities"]
                   if c in ("image.fast", "image.hq", "video")})
    stop = threading.Event()
    threading.Thread(target=feeder, args=(url, tenant, caps, stop), daemon=True).start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        _, v = call(url + "/v1/fleet", admin)
        if all(g["jobs"] for g in v["gpus"]):
            break
        time.sleep(0.5)
    print(f"gpuqd pid {pid}, {len(gpus)} GPUs, busy: "
          f"{sum(1 for g in v['gpus'] if g['jobs'])}", flush=True)

    base = measure(pid, a.window)
    with Chromium(start_timeout_s=60, command_timeout_s=60) as b:
        if b.navigate(url + "/", timeout_s=60) != 200:
            sys.exit("the dashboard page did not load")
        b.type("#key", admin)
        b.click("#connect")
        b.wait_for(f"{json.dumps(gpus)}.every((id) =>"
                   f" document.querySelector(`.gpu[data-gpu=\"${{id}}\"]`))", 60,
                   "every GPU card")
        with_dash = measure(pid, a.window)
        if a.shot:
            b.screenshot(os.path.abspath(a.shot))
    stop.set()
    print(f"gpuqd CPU without a dashboard: {100 * base:.2f}% of one core "
          f"({a.window:.0f} s window)")
    print(f"gpuqd CPU with one dashboard:  {100 * with_dash:.2f}% of one core")
    print(f"one dashboard costs:           {100 * (with_dash - base):+.2f}% of one core")


if __name__ == "__main__":
    main()
