"""`gpuq top`: the fleet in a terminal, against a real gpuqd and a real
gpuq-agent with three simulated GPUs. --once prints one frame for scripts;
the interactive mode runs in a real terminal under tmux (capture-pane): it
draws the fleet, and `q` or Ctrl-C leave with the terminal restored (no
alternate screen, canonical mode and echo back on). Every wait is bounded."""

import os
import shlex
import shutil
import subprocess
import time
import uuid

import pytest

from gpuq_harness import SLOW, binary, wait_until
from test_agent import HEAD_CONFIG, Agent, submit


@pytest.fixture
def fleet(head_factory, tmp_path):
    head = head_factory(config_text=HEAD_CONFIG)
    agent = Agent(head, tmp_path, "top", gpus=3).start()
    agent.wait_ready()
    yield head, agent
    agent.stop()


def cli_env(head, key):
    e = {k: v for k, v in os.environ.items() if not k.startswith("GPUQ_")}
    e.update(GPUQ_URL=head.url, GPUQ_KEY=key, HOME=head.data_dir, NO_COLOR="1")
    return e


def start_job(head, tenant_name):
    c = head.client(head.add_tenant(tenant_name))
    job = submit(c, {"capability": "image.fast",
                     "params": {"prompt": "top", "width": 256, "height": 256,
                                "sim_ms": int(30000 * SLOW)}})

    def running():
        j = c.get(f"/v1/jobs/{job['id']}").json()
        return j if j["state"] == "running" else None

    return c, wait_until(running, 20 * SLOW, f"job {job['id']} to run")


def test_top_once_shows_every_gpu_and_the_running_job(fleet):
    head, agent = fleet
    c, job = start_job(head, "once")
    p = subprocess.run([binary("gpuq"), "top", "--once"], env=cli_env(head, head.admin_key),
                       capture_output=True, text=True, timeout=30 * SLOW)
    assert p.returncode == 0, p.stderr
    for gpu in agent.worker_ids():
        assert gpu in p.stdout
    row = [ln for ln in p.stdout.splitlines() if ln.startswith(job["worker_id"])]
    assert row and f"#{job['id']} image.fast/" in row[0], p.stdout
    assert "image.fast" in p.stdout and "interactive" in p.stdout      # its queue row
    assert f"job {job['id']} -> {job['worker_id']}" in p.stdout         # its decision
    assert "\x1b" not in p.stdout                                        # not a terminal: plain
    c.delete(f"/v1/jobs/{job['id']}")


def test_top_once_with_a_bad_key_says_so(fleet):
    head, _ = fleet
    p = subprocess.run([binary("gpuq"), "top", "--once"], env=cli_env(head, "wrong"),
                       capture_output=True, text=True, timeout=30 * SLOW)
    assert p.returncode == 1
    assert "401" in p.stderr and "Authorization" in p.stderr


class Tmux:
    """A private tmux server running one command in a 150x45 terminal."""

    def __init__(self, tmp, command, env):
        assert shutil.which("tmux"), "tmux is not installed: scripts/install-deps installs it"
        self.sock = os.path.join(str(tmp), f"tmux-{uuid.uuid4().hex[:8]}")
        self.env = env
        self.tmux("new-session", "-d", "-x", "150", "-y", "45", "sh", "-c", command)

    def tmux(self, *args):
        p = subprocess.run(["tmux", "-S", self.sock, "-f", "/dev/null", *args], env=self.env,
                           capture_output=True, text=True, timeout=20 * SLOW)
        assert p.returncode == 0, f"tmux {args[0]}: {p.stderr}"
        return p.stdout

    def screen(self):
        return self.tmux("capture-pane", "-p")

    def alternate_on(self):
        return self.tmux("display-message", "-p", "#{alternate_on}").strip() == "1"

    def close(self):
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True,
                       timeout=20 * SLOW)


@pytest.mark.parametrize("leave", ["q", "C-c"])
def test_top_interactive_draws_the_fleet_and_leaves_the_terminal_restored(fleet, tmp_path,
                                                                          leave):
    head, agent = fleet
    c, job = start_job(head, "live" + leave.replace("-", ""))
    stty = os.path.join(str(tmp_path), "stty")
    # After top: the exit code and the terminal's modes, then wait (cat) so the
    # pane stays to be read.
    command = (f"{shlex.quote(binary('gpuq'))} top --interval 1; echo \"top-exit=$?\"; "
               f"stty -a > {shlex.quote(stty)}; cat")
    t = Tmux(tmp_path, command, cli_env(head, head.admin_key))
    try:
        def drawn():
            s = t.screen()
            return s if all(g in s for g in agent.worker_ids()) and f"#{job['id']}" in s \
                else None

        screen = wait_until(drawn, 20 * SLOW, "top to draw every GPU and the job")
        assert "q: quit" in screen
        assert t.alternate_on()
        t.tmux("send-keys", leave)
        wait_until(lambda: "top-exit=0" in t.screen(), 20 * SLOW, "top to exit 0")
        wait_until(lambda: os.path.exists(stty) and os.path.getsize(stty) > 0, 10 * SLOW,
                   "stty to report the terminal's modes")
        assert not t.alternate_on(), "the alternate screen was left on"
        modes = open(stty).read().split()
        for mode in ("icanon", "echo", "isig", "icrnl", "ixon"):
            assert mode in modes, f"{mode} not restored: {modes}"
        assert "gpuq top" not in t.screen()      # the frame went with the alternate screen
    finally:
        t.close()
    c.delete(f"/v1/jobs/{job['id']}")
