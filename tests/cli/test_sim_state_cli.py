"""A simulated host's state (event history, outbox, caches) stays with the simulation: never under the real
host's /var/lib/npumon, and found again by `npumon events --sim-state DIR`."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from npumon.config.schema import STATE_DIR_ENV
from npumon.settings import Config
from npumon.sim.target import simulation_config


@pytest.fixture
def control_on(tmp_path):
    path = tmp_path / "npumon.yaml"
    path.write_text("control:\n  enabled: true\n")
    return str(path)


def test_a_simulated_control_action_is_recorded_with_the_simulation(tmp_path, run, control_on):
    sim = str(tmp_path / "sim")
    code, _, err = run("control", "fan", "--duty", "60", "--simulate", "--sim-state", sim, "--config", control_on)
    assert code == 1 and "fan control unavailable" in err  # the simulated 910B server has no npu-smi fan knob
    assert os.path.exists(os.path.join(sim, "npumon-state", "events.sqlite"))
    code, out, _ = run("events", "--sim-state", sim, "--json", "--config", control_on)
    (event,) = json.loads(out)
    assert code == 0 and event["kind"] == "control_refused" and event["details"]["knob"] == "fan_duty"
    code, out, _ = run("ack", "--all", "--simulate", "--sim-state", sim)
    assert (code, out) == (0, "no active findings to acknowledge\n")


def test_history_commands_never_read_the_real_host_for_a_simulation(run):
    code, _, err = run("events", "--simulate")
    assert code == 2 and err.startswith("npumon: --simulate: a simulated host keeps a history only in its "
                                        "--sim-state DIR")


def test_a_state_dir_chosen_in_the_config_is_kept(tmp_path, monkeypatch):
    monkeypatch.delenv(STATE_DIR_ENV)  # the built-in default, /var/lib/npumon, is the one a simulation avoids
    chosen = Config(state_dir=str(tmp_path / "mine"))
    assert simulation_config(chosen, "/tmp/sim") is chosen
    assert simulation_config(Config(state_dir="/var/lib/npumon/"), "/tmp/sim").state_dir == "/tmp/sim/npumon-state"


def _private_var_lib_npumon_available() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None and os.path.isdir("/var/lib")


@pytest.mark.slow  # every simulated command as a process of its own: about 24 s of CPU
@pytest.mark.integration
@pytest.mark.skipif(not _private_var_lib_npumon_available(), reason="needs root and unshare(1) for a private mount")
def test_no_simulated_command_creates_anything_under_var_lib_npumon(tmp_path, control_on, monkeypatch):
    """Each command runs in a mount namespace whose /var/lib is a fresh empty tmpfs; afterwards /var/lib/npumon
    must still be empty. The commands are the ones that record: control (refused and dry-run actions are
    audited), check, and the daemon itself. They run with the built-in default state_dir, not the test's."""
    monkeypatch.delenv(STATE_DIR_ENV)
    npumon = "{} -m npumon.cli.main".format(sys.executable)
    dry_run = tmp_path / "dry.yaml"
    dry_run.write_text("control:\n  enabled: true\n  dry_run: true\n")
    script = "\n".join([
        "set -u",
        # /var/lib itself gets the tmpfs: creating /var/lib/npumon on the host to mount over would be the very
        # change to the host's state that the suite's guard (tests/state_guard.py) fails on.
        "mount -t tmpfs tmpfs /var/lib && mkdir /var/lib/npumon || exit 99",
        "{} control fan --duty 60 --simulate --config {}".format(npumon, control_on),
        "{} control power quiet --simulate --sim-product atlas-200i-a2 --config {}".format(npumon, dry_run),
        "{} control power quiet --simulate --config {}".format(npumon, control_on),
        "{} check --simulate=overheat >/dev/null".format(npumon),
        "timeout -s TERM 8 {} run --simulate --listen 127.0.0.1:0 2>/dev/null".format(npumon),
        'echo "LEFT:$(ls -A /var/lib/npumon)"',
    ])
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 99, proc.stderr
    assert "dry run: would set" in proc.stdout, proc.stdout + proc.stderr
    assert "LEFT:\n" in proc.stdout, proc.stdout + proc.stderr
