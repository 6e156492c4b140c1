#!/usr/bin/python3
"""Runs every test: the cmocka unit tests (each case counted through TAP) and
the pytest integration tests (real processes on 127.0.0.1), in the normal build
and again in the ASan/UBSan build. Prints `N passed, N failed[, N skipped]`
last and exits non-zero if anything failed."""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNIT_TIMEOUT_S = 300
INTEGRATION_TIMEOUT_S = 1800


class Tally:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0
        self.failures = []

    def add(self, label, status):
        if status == "pass":
            self.passed += 1
        elif status == "skip":
            self.skipped += 1
        else:
            self.failed += 1
            self.failures.append(label)


TAP_LINE = re.compile(r"^(not ok|ok)\s+\d+\s*-?\s*(.*?)(\s+#\s*(SKIP|skip).*)?$")


def run_unit(build, tag, tally):
    out = subprocess.run(["meson", "introspect", "--tests", build],
                         capture_output=True, text=True, check=True).stdout
    tests = json.loads(out)
    for t in tests:
        env = dict(os.environ)
        env.update(t.get("env") or {})
        env["CMOCKA_MESSAGE_OUTPUT"] = "TAP"
        label = f"[{tag}] {t['name']}"
        try:
            p = subprocess.run(t["cmd"], env=env, capture_output=True, text=True,
                               timeout=UNIT_TIMEOUT_S, cwd=t.get("workdir") or ROOT)
        except subprocess.TimeoutExpired:
            tally.add(label + " (timed out)", "fail")
            print(f"FAIL {label}: timed out after {UNIT_TIMEOUT_S}s")
            continue
        cases = 0
        for line in p.stdout.splitlines():
            m = TAP_LINE.match(line.strip())
            if not m:
                continue
            cases += 1
            name = f"{label}::{m.group(2).strip()}"
            status = "skip" if m.group(4) else ("pass" if m.group(1) == "ok" else "fail")
            tally.add(name, status)
            if status == "fail":
                print(f"FAIL {name}")
        if cases == 0 or (p.returncode != 0 and not any(
                f.startswith(label) for f in tally.failures)):
            tally.add(label + f" (exit {p.returncode}, {cases} cases)", "fail")
            print(f"FAIL {label}: exit {p.returncode}")
        if p.returncode != 0:
            sys.stdout.write(p.stdout[-4000:])
            sys.stdout.write(p.stderr[-4000:])
        else:
            print(f"ok   {label}: {cases} cases")


def run_integration(build, tag, tally, extra):
    with tempfile.TemporaryDirectory(prefix="gpuq-pytest-") as tmp:
        xml_path = os.path.join(tmp, "junit.xml")
        env = dict(os.environ)
        env["GPUQ_BUILD"] = os.path.abspath(build)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if tag == "asan":
            env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
            env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
            env["GPUQ_SANITIZED"] = "1"
        cmd = ["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--junitxml", xml_path, "-o", "junit_family=xunit2",
               os.path.join(ROOT, "tests", "integration")] + extra
        try:
            p = subprocess.run(cmd, env=env, timeout=INTEGRATION_TIMEOUT_S, cwd=ROOT)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = -1
            print(f"FAIL [{tag}] integration: timed out after {INTEGRATION_TIMEOUT_S}s")
        if rc == 5:  # pytest: no tests collected
            print(f"[{tag}] integration: no tests collected")
            return
        if not os.path.exists(xml_path):
            tally.add(f"[{tag}] integration (pytest exit {rc}, no report)", "fail")
            return
        for case in ET.parse(xml_path).getroot().iter("testcase"):
            name = f"[{tag}] {case.get('classname')}::{case.get('name')}"
            status = "pass"
            for child in case:
                if child.tag in ("failure", "error"):
                    status = "fail"
                elif child.tag == "skipped":
                    status = "skip"
            tally.add(name, status)


# Seconds each harness explores new inputs in make test (six harnesses: about
# 90 s in all, corpus replay included).
FUZZ_SECONDS = 14


def fuzz_seeds(name):
    """The committed seed corpus of harness fuzz_<x>: tests/fuzz/corpus/<x>, else the
    longest folder whose name is a '_'-prefix of <x> (fuzz_job_parser -> job)."""
    base = os.path.join(ROOT, "tests", "fuzz", "corpus")
    stem = name[len("fuzz_"):] if name.startswith("fuzz_") else name
    parts = stem.split("_")
    for n in range(len(parts), 0, -1):
        path = os.path.join(base, "_".join(parts[:n]))
        if os.path.isdir(path):
            return path
    return None


def run_fuzzers(fuzz_build, tally):
    """Each libFuzzer harness replays its corpus, then explores for a bounded time."""
    import glob
    import shutil
    for exe in sorted(glob.glob(os.path.join(fuzz_build, "tests", "fuzz", "fuzz_*"))):
        if not os.path.isfile(exe) or not os.access(exe, os.X_OK) or exe.endswith(".p"):
            continue
        name = os.path.basename(exe)
        label = f"[fuzz] {name}"
        seeds = fuzz_seeds(name)
        with tempfile.TemporaryDirectory(prefix="gpuq-fuzz-") as tmp:
            corpus = os.path.join(tmp, "corpus")
            if seeds:
                shutil.copytree(seeds, corpus)
            else:
                os.makedirs(corpus)
            cmd = [exe, corpus, f"-max_total_time={FUZZ_SECONDS}", "-max_len=8192",
                   "-print_final_stats=0", f"-artifact_prefix={tmp}/"]
            started = time.monotonic()
            try:
                p = subprocess.run(cmd, capture_output=True, text=True,
                                   timeout=FUZZ_SECONDS * 4 + 60)
                ok = p.returncode == 0
            except subprocess.TimeoutExpired:
                ok, p = False, None
            took = time.monotonic() - started
        tally.add(label, "pass" if ok else "fail")
        print(("ok   " if ok else "FAIL ") + f"{label} ({took:.0f} s, seeds: "
              f"{os.path.relpath(seeds, ROOT) if seeds else 'none'})")
        if not ok and p is not None:
            sys.stdout.write(p.stderr[-4000:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--asan-build", default="build-asan")
    ap.add_argument("--no-asan", action="store_true")
    ap.add_argument("--fuzz-build", default=None)
    ap.add_argument("-k", dest="keyword", help="pytest -k expression")
    args = ap.parse_args()
    extra = ["-k", args.keyword] if args.keyword else []

    tally = Tally()
    builds = [(args.build, "build")]
    if not args.no_asan and os.path.isdir(args.asan_build):
        builds.append((args.asan_build, "asan"))
    for build, tag in builds:
        print(f"== unit tests ({tag})", flush=True)
        run_unit(build, tag, tally)
        print(f"== integration tests ({tag})", flush=True)
        run_integration(build, tag, tally, extra)

    if args.fuzz_build and os.path.isdir(args.fuzz_build) and not args.keyword:
        print("== fuzz harnesses", flush=True)
        run_fuzzers(args.fuzz_build, tally)

    if tally.failures:
        print("\nFailed:")
        for f in tally.failures:
            print("  " + f)
    line = f"{tally.passed} passed, {tally.failed} failed"
    if tally.skipped:
        line += f", {tally.skipped} skipped"
    print(line)
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
