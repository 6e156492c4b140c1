#!/usr/bin/env python3
"""runtime_fault.py: a fault-injecting runtime for the fault suite. It speaks
the runtime protocol v1 (docs/protocol-runtime.md) well enough to say hello,
load models, answer pings and run warm-ups and jobs with a real PNG, and then
misbehaves in one of two ways on its first real (non-warm-up) job:

  --mode exit   exits at once without answering; from then on every start of
                a runtime for the same worker exits at once, before its hello
                (a runtime whose GPU went bad: the agent must back off, not spin)
  --mode flood  writes garbage lines in a tight loop while still answering
                pings (the agent must bound its log and restart the runtime);
                runtimes started later for the same worker behave

--state DIR gets one line per event in DIR/<worker>.events ("start PID",
"job ID", "flood PID", "exit PID") so a test counts starts and jobs without
parsing the agent's log. A flood stops by itself after --flood-max-s seconds
(a failing agent must not take the machine with it)."""

import argparse
import json
import os
import struct
import sys
import threading
import time
import zlib


def png(seed, size=64):
    """A PNG with plenty of pixel variance (passes the agent's QC)."""
    rows = bytearray()
    for y in range(size):
        rows.append(0)
        for x in range(size):
            rows += bytes(((x * 7 + y * 13 + seed) % 256, (x * y + seed * 3) % 256,
                           (x * 29 + seed) % 256))

    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(rows)))
            + chunk(b"IEND", b""))


class Runtime:
    def __init__(self, args):
        self.args = args
        self.worker = os.environ.get("GPUQ_WORKER_ID", "unknown")
        self.out_lock = threading.Lock()
        os.makedirs(args.state, exist_ok=True)
        self.events = os.path.join(args.state, self.worker + ".events")
        self.broken = os.path.join(args.state, self.worker + ".broken")
        self.flooded = os.path.join(args.state, self.worker + ".flooded")

    def event(self, what):
        with open(self.events, "a") as f:
            f.write(what + "\n")

    def send(self, obj):
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        with self.out_lock:
            try:
                os.write(1, data)
            except OSError:
                os._exit(0)

    def run(self, msg):
        rid = msg.get("id", "")
        if not msg.get("warmup"):
            self.event("job " + rid)
            if self.args.mode == "exit":
                open(self.broken, "w").close()
                self.event("exit %d" % os.getpid())
                os._exit(1)
            if self.args.mode == "flood" and not os.path.exists(self.flooded):
                open(self.flooded, "w").close()
                threading.Thread(target=self.flood, args=(rid,), daemon=True).start()
                return
        path = os.path.join(msg["output_dir"], rid + ".png")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(png(sum(rid.encode()) % 251))
        os.rename(tmp, path)
        self.send({"type": "progress", "id": rid, "phase": "generating", "progress": 0.5})
        self.send({"type": "result", "id": rid,
                   "outputs": [{"path": path, "content_type": "image/png"}], "run_ms": 1})

    def flood(self, rid):
        self.event("flood %d" % os.getpid())
        lines = []
        for i in range(400):
            k = i % 4
            if k == 0:
                lines.append(b"garbage garbage garbage %d\n" % i)
            elif k == 1:
                lines.append(b'{"type":"progress","id":"no-such-job","progress":0.5}\n')
            elif k == 2:
                lines.append(b'{"type":"teleport","id":"%s"}\n' % rid.encode())
            else:
                lines.append(b"\x01\x02\xff not json at all\n")
        block = b"".join(lines)
        end = time.monotonic() + self.args.flood_max_s
        while time.monotonic() < end:
            with self.out_lock:
                try:
                    os.write(1, block)
                except OSError:
                    os._exit(0)
        self.event("flood-gave-up %d" % os.getpid())
        os._exit(3)

    def serve(self):
        self.event("start %d" % os.getpid())
        if self.args.mode == "exit" and os.path.exists(self.broken):
            self.event("exit %d" % os.getpid())
            os._exit(1)
        self.send({"type": "hello", "protocol": 1, "runtime": "runtime-fault", "version": "1"})
        for line in sys.stdin.buffer:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            t = msg.get("type")
            if t == "shutdown":
                break
            if t == "ping":
                self.send({"type": "pong", "id": msg.get("id", "")})
            elif t == "load":
                self.send({"type": "loaded", "id": msg.get("id", ""), "model": msg.get("model", ""),
                           "vram_mb": msg.get("vram_mb", 1000), "load_ms": 1})
            elif t == "unload":
                self.send({"type": "unloaded", "id": msg.get("id", ""),
                           "model": msg.get("model", "")})
            elif t == "run":
                self.run(msg)
            elif t == "cancel":
                self.send({"type": "error", "id": msg.get("id", ""), "class": "cancelled",
                           "message": "cancelled"})
        os._exit(0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("exit", "flood"), required=True)
    p.add_argument("--state", required=True)
    p.add_argument("--flood-max-s", type=float, default=30.0)
    Runtime(p.parse_args()).serve()


if __name__ == "__main__":
    main()
