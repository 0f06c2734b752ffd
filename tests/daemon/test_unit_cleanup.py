"""The daemon in a transient systemd unit with the shipped unit's KillMode=mixed and MemoryMax=256M: stopping
it kills even an npu-smi helper that npumon cannot find (it detached, cleared its environment and its parent
exited), and a 50 MiB npu-smi answer leaves the daemon running and serving. Skipped where systemd is not the
init system (containers, CI runners): a transient unit needs a running system manager."""

import os
import shutil
import subprocess
import sys
import time

import pytest
import requests

from daemon_harness import free_port, wait_until
from npu_smi_fakes import FakeNpuSmi
from paths import REPO

UNIT_SETTINGS = ("KillMode=mixed", "MemoryMax=256M", "TasksMax=128", "Type=notify", "NotifyAccess=main")


def systemctl(*args):
    return subprocess.run(["systemctl"] + list(args), capture_output=True, text=True, timeout=30)


@pytest.fixture
def unit(tmp_path):
    """start(fake) -> (unit name, port): `npumon run` against the fake npu-smi in a transient service."""
    if not os.path.isdir("/run/systemd/system"):
        pytest.skip("systemd is not running as the init system here (no /run/systemd/system), so no transient "
                    "unit can be started; the unit's KillMode=mixed cleanup is tested where it is")
    if shutil.which("systemd-run") is None:
        pytest.skip("systemd-run is not installed")
    names = []

    def start(fake):
        name = "npumon-test-{}-{}.service".format(os.getpid(), len(names))
        port = free_port()
        command = ["systemd-run", "--unit", name, "--collect", "--setenv", "PYTHONPATH=" + REPO]
        command += [part for setting in UNIT_SETTINGS for part in ("--property", setting)]
        command += [sys.executable, "-m", "npumon.cli.main", "run", "--config", fake.config(str(tmp_path)),
                    "--listen", "127.0.0.1:{}".format(port)]
        names.append(name)
        started = subprocess.run(command, capture_output=True, text=True, timeout=60)  # returns once READY
        assert started.returncode == 0, started.stderr
        return name, port

    yield start
    for name in names:
        systemctl("stop", name)


@pytest.mark.integration
def test_stopping_the_unit_kills_a_helper_npumon_cannot_find(unit, tmp_path):
    fake = FakeNpuSmi(str(tmp_path / "bin"))
    fake.behave("vanish")
    try:
        name, _ = unit(fake)
        helpers = wait_until(lambda: [pid for pid in fake.processes() if _is_helper(pid)], 15, what="a helper")
        time.sleep(1.0)
        assert set(helpers) <= set(fake.processes())  # the calls ended; npumon left the detached helper alone
        assert systemctl("stop", name).returncode == 0
        assert fake.wait_gone(5) == []  # the service's cgroup took it
    finally:
        fake.kill_all()


@pytest.mark.integration
def test_a_50_mib_answer_under_memory_max_256m_leaves_the_unit_running(unit, tmp_path):
    fake = FakeNpuSmi(str(tmp_path / "bin"))
    try:
        name, port = unit(fake)
        fake.behave("flood")
        status = "http://127.0.0.1:{}/status".format(port)
        wait_until(lambda: requests.get(status, timeout=5).json()["sources"]["npu-smi"]["error"] ==
                   "output over 4194304 bytes: stopped reading, process group killed", 20, what="the capped call")
        time.sleep(3.0)  # about ten more 50 MiB answers
        assert systemctl("is-active", name).stdout.strip() == "active"
        assert systemctl("show", "--property", "NRestarts", name).stdout.strip() in ("NRestarts=0", "")
        assert requests.get("http://127.0.0.1:{}/metrics".format(port), timeout=5).status_code == 200
    finally:
        fake.kill_all()


def _is_helper(pid):
    try:
        with open("/proc/{}/cmdline".format(pid), "rb") as handle:
            return handle.read().split(b"\0")[-2].endswith(b"-helper")
    except (OSError, IndexError):
        return False
