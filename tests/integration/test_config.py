"""gpuqd's configuration: the documented file is accepted as written, and a
bad setting stops gpuqd with the file, line, setting and reason."""

import os
import re
import subprocess

from gpuq_harness import ROOT, binary


def documented_config():
    with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
        return re.search(r"```ini\n(.*?)```", f.read(), re.S).group(1)


def test_documented_config_is_accepted(head_factory):
    h = head_factory(config_text=documented_config())
    key = h.add_tenant("acme")
    r = h.client(key).post("/v1/jobs", {"capability": "bg-remove"})
    assert r.status == 201 and r.json()["model"] == "bg-remove"


def test_config_extends_capabilities_and_models(head_factory):
    h = head_factory(config_text="[capabilities]\naudio.tts = tts-small\n\n"
                                 "[model.tts-small]\nvram_mb = 3000\nclass = utility\nrun_s = 0.8\n")
    c = h.client(h.add_tenant("acme"))
    job = c.post("/v1/jobs", {"capability": "audio.tts"}).json()
    assert job["model"] == "tts-small" and abs(job["cost_s"] - 0.8) < 0.01


def test_bad_config_names_line_and_setting(tmp_path):
    cases = [
        ("[jobs]\nmax_attempts = 0\n", "2: jobs.max_attempts"),
        ("[server]\nlisten = 127.0.0.1:0\n[nope]\nx = 1\n", "4: [nope]: unknown section"),
        ("[workers]\nttl_ms = fast\n", "2: workers.ttl_ms"),
        ("[capabilities]\nimage.x = missing-model\n", "capabilities.image.x"),
        ("[scheduler]\nhot_penalty = 0.5\n", "scheduler.hot_penalty"),
        ("just words\n", "1: expected 'key = value'"),
    ]
    for text, expect in cases:
        path = tmp_path / "bad.conf"
        path.write_text(text)
        p = subprocess.run([binary("gpuqd"), "--config", str(path), "--data",
                            str(tmp_path / "data"), "--listen", "127.0.0.1:0"],
                           capture_output=True, text=True, timeout=20)
        assert p.returncode == 2, (text, p.stderr)
        assert expect in p.stderr, (text, p.stderr)
        assert not (tmp_path / "data" / "head.url").exists()
