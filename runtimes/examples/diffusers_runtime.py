#!/usr/bin/env python3
"""diffusers_runtime.py: a gpuq runtime for real image models with Hugging Face
diffusers, speaking the runtime protocol v1 (docs/protocol-runtime.md) on
stdin/stdout. Not run in CI: it needs a CUDA GPU, torch and diffusers.

    runtime = python3 runtimes/examples/diffusers_runtime.py \
        --model image-v2=stabilityai/sdxl-turbo --model image-hq=stabilityai/stable-diffusion-xl-base-1.0 \
        --upscaler upscale=stabilityai/stable-diffusion-x4-upscaler

(--upscaler: a model that scales its input image, for the upscale capability.)

Jobs may carry, beside the usual params (prompt, negative_prompt, width,
height, steps, seed, guidance):

- params.extra (passed by gpuq untouched): "negative_prompt" (used when the
  top-level one is empty), "scheduler" or "sampler" (a diffusers scheduler
  class name, e.g. "EulerAncestralDiscreteScheduler", or a short name such as
  "euler_a", "dpmpp_2m", "ddim"), "lora" ({"path": repo-or-file, "weight":
  0.8} or a list of them), "strength" (img2img/inpaint, default 0.6).
- params.inputs (local file paths given by the agent): "image" turns a
  text-to-image model into img2img (and is what an upscaler scales); "image"
  with "mask" is inpainting.

gpuq-agent starts one copy per GPU with CUDA_VISIBLE_DEVICES set, so this
process sees exactly one GPU (cuda:0). A reader thread answers pings at once
(also while a job computes, as the protocol requires) and flags cancels; the
main thread loads models and runs jobs one at a time."""

import argparse
import json
import os
import queue
import sys
import threading
import time

PROTOCOL = 1
out_lock = threading.Lock()


def send(msg):
    line = json.dumps(msg, separators=(",", ":"))
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def log(level, message):
    send({"type": "log", "level": level, "message": message})


def classify(exc):
    """Maps an exception to a protocol error class."""
    name = type(exc).__name__
    text = str(exc)
    if name == "OutOfMemoryError" or "out of memory" in text.lower():
        return "oom"
    if "CUDA" in text or "cuda" in name.lower():
        return "cuda"
    if isinstance(exc, (ValueError, TypeError, KeyError)):
        return "bad_input"
    return "internal"


class Cancelled(Exception):
    pass


# Short sampler names clients use, mapped to diffusers scheduler classes.
SCHEDULERS = {
    "euler": "EulerDiscreteScheduler",
    "euler_a": "EulerAncestralDiscreteScheduler",
    "dpmpp_2m": "DPMSolverMultistepScheduler",
    "ddim": "DDIMScheduler",
    "lms": "LMSDiscreteScheduler",
    "pndm": "PNDMScheduler",
    "unipc": "UniPCMultistepScheduler",
}


def open_image(path):
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


class Runtime:
    def __init__(self, repos, upscalers, dtype):
        import torch  # imported here so that --help works without torch

        self.torch = torch
        self.repos = repos
        self.upscalers = upscalers
        self.loras = {}  # model name -> the LoRA set now applied (a tuple)
        self.dtype = torch.float16 if dtype == "fp16" else torch.bfloat16
        self.pipes = {}
        self.cancelled = set()
        self.cancel_lock = threading.Lock()

    def load(self, msg):
        from diffusers import AutoPipelineForText2Image

        name = msg["model"]
        if name in self.pipes:
            return {"type": "loaded", "id": msg["id"], "model": name}
        repo = self.repos.get(name) or self.upscalers.get(name)
        if not repo:
            raise ValueError(f"no --model or --upscaler mapping for {name}")
        t0 = time.monotonic()
        before = self.torch.cuda.memory_allocated()
        if name in self.upscalers:
            from diffusers import StableDiffusionUpscalePipeline

            pipe = StableDiffusionUpscalePipeline.from_pretrained(repo, torch_dtype=self.dtype)
        else:
            pipe = AutoPipelineForText2Image.from_pretrained(repo, torch_dtype=self.dtype)
        pipe = pipe.to("cuda")
        pipe.set_progress_bar_config(disable=True)
        self.pipes[name] = pipe
        used = (self.torch.cuda.memory_allocated() - before) // (1024 * 1024)
        return {"type": "loaded", "id": msg["id"], "model": name, "vram_mb": int(used),
                "load_ms": int((time.monotonic() - t0) * 1000)}

    def unload(self, msg):
        self.pipes.pop(msg["model"], None)
        self.loras.pop(msg["model"], None)
        self.torch.cuda.empty_cache()
        return {"type": "unloaded", "id": msg["id"], "model": msg["model"]}

    def set_scheduler(self, pipe, name):
        """params.extra.scheduler/sampler: a diffusers class name or a short name."""
        import diffusers

        cls = getattr(diffusers, SCHEDULERS.get(name, name), None)
        if cls is None or not hasattr(cls, "from_config"):
            raise ValueError(f"params.extra.scheduler: unknown scheduler {name!r}")
        pipe.scheduler = cls.from_config(pipe.scheduler.config)

    def set_loras(self, model, pipe, lora):
        """params.extra.lora: {"path", "weight"} or a list; applied per job, kept while equal."""
        items = lora if isinstance(lora, list) else [lora] if lora else []
        wanted = []
        for it in items:
            if isinstance(it, str):
                it = {"path": it}
            if not isinstance(it, dict) or not isinstance(it.get("path"), str):
                raise ValueError("params.extra.lora: {\"path\": …, \"weight\": …} expected")
            wanted.append((it["path"], float(it.get("weight", 1.0))))
        wanted = tuple(wanted)
        if self.loras.get(model, ()) == wanted:
            return
        if self.loras.get(model):
            pipe.unload_lora_weights()
        names = []
        for i, (path, _) in enumerate(wanted):
            names.append(f"l{i}")
            pipe.load_lora_weights(path, adapter_name=names[-1])
        if names:
            pipe.set_adapters(names, adapter_weights=[w for _, w in wanted])
        self.loras[model] = wanted

    def run(self, msg):
        rid = msg["id"]
        model = msg["model"]
        pipe = self.pipes[model]
        p = msg.get("params") or {}
        extra = p.get("extra") or {}
        inputs = p.get("inputs") or {}
        steps = int(p.get("steps", 4))
        width = int(p.get("width", 1024))
        height = int(p.get("height", 1024))
        gen = self.torch.Generator("cuda").manual_seed(int(p.get("seed", 0)))
        negative = p.get("negative_prompt") or extra.get("negative_prompt") or None
        if model not in self.upscalers:
            sched = extra.get("scheduler") or extra.get("sampler")
            if sched:
                self.set_scheduler(pipe, str(sched))
            self.set_loras(model, pipe, extra.get("lora"))
        t0 = time.monotonic()
        last = [0.0]

        def on_step(_pipe, step, _t, kwargs):
            with self.cancel_lock:
                if rid in self.cancelled:
                    raise Cancelled()
            now = time.monotonic()
            if now - last[0] >= 0.25:
                last[0] = now
                send({"type": "progress", "id": rid, "phase": "generating",
                      "progress": min(1.0, (step + 1) / max(1, steps))})
            return kwargs

        common = dict(prompt=p.get("prompt", ""), negative_prompt=negative,
                      num_inference_steps=steps, generator=gen, callback_on_step_end=on_step)
        if model in self.upscalers:
            if "image" not in inputs:
                raise ValueError("params.inputs.image: an upscaler needs an input image")
            image = pipe(image=open_image(inputs["image"]), **common).images[0]
        elif "image" in inputs:
            from diffusers import AutoPipelineForImage2Image, AutoPipelineForInpainting

            src = open_image(inputs["image"]).resize((width, height))
            strength = float(extra.get("strength", 0.6))
            if "mask" in inputs:
                edit = AutoPipelineForInpainting.from_pipe(pipe)
                mask = open_image(inputs["mask"]).resize((width, height))
                image = edit(image=src, mask_image=mask, strength=strength,
                             guidance_scale=float(p.get("guidance", 0.0)), **common).images[0]
            else:
                edit = AutoPipelineForImage2Image.from_pipe(pipe)
                image = edit(image=src, strength=strength,
                             guidance_scale=float(p.get("guidance", 0.0)), **common).images[0]
        else:
            image = pipe(width=width, height=height, guidance_scale=float(p.get("guidance", 0.0)),
                         **common).images[0]
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in rid)
        path = os.path.join(msg["output_dir"], safe + ".png")
        tmp = path + ".tmp"
        image.save(tmp, format="PNG")
        os.replace(tmp, path)
        return {"type": "result", "id": rid, "run_ms": int((time.monotonic() - t0) * 1000),
                "outputs": [{"path": path, "content_type": "image/png"}]}


def reader(work, rt_holder):
    """Reads stdin: answers ping at once, flags cancels, queues the rest."""
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            log("warn", "ignored a line that is not JSON")
            continue
        if not isinstance(msg, dict):
            continue
        kind = msg.get("type")
        if kind == "ping":
            send({"type": "pong", "id": msg.get("id", "")})
        elif kind == "cancel":
            rt = rt_holder[0]
            if rt is not None:
                with rt.cancel_lock:
                    rt.cancelled.add(msg.get("id"))
        elif kind == "shutdown":
            break
        else:
            work.put(msg)
    work.put(None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", default=[],
                    help="NAME=HF_REPO: the gpuq model name and the pipeline to load for it")
    ap.add_argument("--upscaler", action="append", default=[],
                    help="NAME=HF_REPO: a model that upscales its params.inputs.image")
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    args = ap.parse_args()
    repos = dict(m.split("=", 1) for m in args.model)
    upscalers = dict(m.split("=", 1) for m in args.upscaler)

    rt_holder = [None]
    work = queue.Queue()
    threading.Thread(target=reader, args=(work, rt_holder), daemon=True).start()
    rt = Runtime(repos, upscalers, args.dtype)
    rt_holder[0] = rt
    send({"type": "hello", "protocol": PROTOCOL, "runtime": "diffusers-example",
          "version": "0.1"})
    while True:
        msg = work.get()
        if msg is None:
            return 0
        kind, rid = msg.get("type"), msg.get("id", "")
        try:
            if kind == "load":
                send(rt.load(msg))
            elif kind == "unload":
                send(rt.unload(msg))
            elif kind == "run":
                send(rt.run(msg))
            else:
                log("warn", f"ignored message type {kind!r}")
        except Cancelled:
            send({"type": "error", "id": rid, "class": "cancelled", "message": "cancelled"})
        except Exception as exc:  # every failure is reported with a class
            send({"type": "error", "id": rid, "class": classify(exc),
                  "message": f"{type(exc).__name__}: {exc}"[:500]})
        finally:
            with rt.cancel_lock:
                rt.cancelled.discard(rid)


if __name__ == "__main__":
    sys.exit(main())
