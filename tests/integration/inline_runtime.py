"""A runtime for test_runtime_inline.py: speaks the runtime protocol and
answers each run with bytes derived from its prompt, "MODE:SIZE:SEED":

- inline: SIZE bytes framed after the result line (outputs[0].bytes);
- file: the same bytes through a file in output_dir (what older runtimes do);
- oversize: an inline frame of SIZE bytes, SIZE over the agent's offer;
- badbytes: outputs[0].bytes is not a number, with SIZE bytes after it.

Warm-up runs get 16 inline bytes. The offer it found in
$GPUQ_RESULT_INLINE_MAX is written to the file named by argv[1]."""

import hashlib
import json
import os
import sys


def payload(size, seed):
    out = bytearray()
    n = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}/{n}".encode()).digest()
        n += 1
    return bytes(out[:size])


def send(obj, raw=b""):
    sys.stdout.buffer.write(json.dumps(obj).encode() + b"\n" + raw)
    sys.stdout.buffer.flush()


def main():
    with open(sys.argv[1], "w") as f:
        f.write(os.environ.get("GPUQ_RESULT_INLINE_MAX", "(unset)"))
    send({"type": "hello", "protocol": 1, "runtime": "inline-test"})
    for line in sys.stdin:
        m = json.loads(line)
        t, rid = m.get("type"), m.get("id")
        if t == "shutdown":
            return
        if t == "ping":
            send({"type": "pong", "id": rid})
        elif t == "load":
            send({"type": "loaded", "id": rid, "model": m["model"]})
        elif t == "unload":
            send({"type": "unloaded", "id": rid, "model": m["model"]})
        elif t == "run":
            prompt = (m.get("params") or {}).get("prompt", "")
            mode, size, seed = (prompt.split(":") + ["", "", ""])[:3]
            if m.get("warmup") or not mode:
                mode, size, seed = "inline", "16", "warm"
            data = payload(int(size), seed)
            head = {"type": "result", "id": rid, "run_ms": 1,
                    "outputs": [{"bytes": len(data), "content_type": "application/octet-stream"}]}
            if mode == "file":
                path = os.path.join(m["output_dir"], rid.replace("/", "_") + ".bin")
                with open(path + ".tmp", "wb") as f:
                    f.write(data)
                os.rename(path + ".tmp", path)
                head["outputs"] = [{"path": path, "content_type": "application/octet-stream"}]
                send(head)
            elif mode == "badbytes":
                head["outputs"][0]["bytes"] = "lots"
                send(head, data)
            else:  # inline, oversize
                send(head, data)


if __name__ == "__main__":
    main()
