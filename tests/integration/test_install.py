"""The installed form: `make install DESTDIR=…` puts the binaries, the example
configs, the docs and the systemd units in place; each unit passes
`systemd-analyze verify` (pointed at the staged binaries); both binaries accept
the example configs, and gpuqd serves with its own."""

import os
import re
import shutil
import subprocess

import pytest

from gpuq_harness import BUILD, ROOT, Head, binary

BINS = ["gpuqd", "gpuq", "gpuq-agent", "gpuq-sim", "gpuq-sim-runtime"]


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    dest = tmp_path_factory.mktemp("destdir")
    p = subprocess.run(["make", "-s", "install", f"DESTDIR={dest}", f"BUILD={BUILD}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return dest


def test_make_install_puts_everything_in_place(staged):
    prefix = staged / "usr" / "local"
    for b in BINS:
        path = prefix / "bin" / b
        assert path.exists() and os.access(path, os.X_OK), b
    p = subprocess.run([prefix / "bin" / "gpuq", "--version"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 0 and p.stdout.startswith("gpuq ")
    for f in ("gpuqd.conf", "agent.conf", "agent.env"):
        assert (prefix / "etc" / "gpuq" / f).exists(), f
    assert oct((prefix / "etc" / "gpuq" / "agent.env").stat().st_mode & 0o777) == "0o600"
    assert (prefix / "share" / "doc" / "gpuq" / "docs" / "cli.md").exists()
    units = prefix / "lib" / "systemd" / "system"
    for u in ("gpuqd.service", "gpuq-agent.service"):
        text = (units / u).read_text()
        assert "@" not in re.sub(r"#.*", "", text), f"unfilled placeholder in {u}"
        assert "ExecStart=/usr/local/bin/" in text


def test_install_keeps_an_existing_config(staged):
    conf = staged / "usr" / "local" / "etc" / "gpuq" / "gpuqd.conf"
    conf.write_text("# mine\n")
    p = subprocess.run(["make", "-s", "install", f"DESTDIR={staged}", f"BUILD={BUILD}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert conf.read_text() == "# mine\n"
    shutil.copy(os.path.join(ROOT, "etc", "gpuqd.conf"), conf)


def test_units_pass_systemd_analyze_verify(staged, tmp_path):
    assert shutil.which("systemd-analyze"), "systemd-analyze missing: scripts/install-deps installs systemd"
    units = staged / "usr" / "local" / "lib" / "systemd" / "system"
    for u in ("gpuqd.service", "gpuq-agent.service"):
        # verify checks that ExecStart exists: point it at the staged copy.
        text = (units / u).read_text().replace("/usr/local/", f"{staged}/usr/local/")
        (tmp_path / u).write_text(text)
        p = subprocess.run(["systemd-analyze", "verify", str(tmp_path / u)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        # Unknown keys are only warned about: there must be none.
        assert "Unknown" not in p.stderr and "ignoring" not in p.stderr, p.stderr
        for want in ("Restart=on-failure", "DynamicUser=yes", "StateDirectory=",
                     "KillSignal=SIGTERM"):
            assert want in text, (u, want)


def test_example_configs_are_accepted():
    p = subprocess.run([binary("gpuqd"), "--config", os.path.join(ROOT, "etc", "gpuqd.conf"),
                        "--check-config"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([binary("gpuq-agent"), "--check-config",
                        os.path.join(ROOT, "etc", "agent.conf")],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    # And a broken one is refused, naming the line.
    bad = os.path.join(ROOT, "etc", "agent.conf")
    with open(bad) as f:
        text = f.read() + "\n[agent]\nconcurency = 2\n"
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bad-agent-{os.getpid()}.conf")
    with open(tmp, "w") as f:
        f.write(text)
    try:
        p = subprocess.run([binary("gpuq-agent"), "--check-config", tmp], capture_output=True,
                           text=True, timeout=10)
        assert p.returncode == 2 and "concurency" in p.stderr, p.stderr
    finally:
        os.unlink(tmp)


def test_gpuqd_serves_with_the_example_config(tmp_path):
    h = Head(tmp_path / "head")
    h.config_path = os.path.join(ROOT, "etc", "gpuqd.conf")
    h.start()
    try:
        key = h.add_tenant("acme")
        r = h.client(key).post("/v1/jobs", {"capability": "image.fast"})
        assert r.status == 201, r
    finally:
        h.stop()
