"""No child npumon starts sees a variable that holds a secret (a receiver's `*_env`): npu-smi and the
probe under `npumon check` (real processes that write their environment to a file), a spawn in place of
npu-smi, and the fan watchdog with the command it runs."""

import json
import os
import stat
import subprocess
import sys

from daemon_harness import wait_until
from npumon.childenv import SYSTEMD_VARIABLES, child_environment, withhold
from npumon.settings import load_config
from npumon.services.control.watchdog import WatchdogProcess
from npumon.sim import prepare_simulation
from npumon.sources.runner import CommandResult, CommandRunner

SECRETS = {"NPUMON_TEST_CHILD_URL": "http://127.0.0.1:9/robot/send?access_token=child-t0ken-123",
           "NPUMON_TEST_CHILD_SIGNING": "SECchild-signing-secret", "NPUMON_TEST_CHILD_BEARER": "child-bearer-t0ken"}
VISIBLE = {"NPUMON_TEST_CHILD_VISIBLE": "1"}  # an ordinary variable: children still get the environment

CONFIG = """\
state_dir: {state}
npu_smi: {npu_smi}
probe: {{python: {python}, timeout_seconds: 10}}
notify:
  receivers:
    - {{name: robot, type: dingtalk, url_env: NPUMON_TEST_CHILD_URL, secret_env: NPUMON_TEST_CHILD_SIGNING}}
    - {{name: hook, type: webhook, url: 'http://127.0.0.1:9/hook', bearer_token_env: NPUMON_TEST_CHILD_BEARER}}
"""


def executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def dump_env_script(path, dump_dir, name, then):
    """A program that writes its environment to dump_dir/<name>-<pid>.json, then runs `then`."""
    return executable(path, """#!{python}
import json, os, sys
with open(os.path.join({dump!r}, "{name}-%d.json" % os.getpid()), "w") as handle:
    json.dump(dict(os.environ), handle)
{then}
""".format(python=sys.executable, dump=str(dump_dir), name=name, then=then))


def dumps(dump_dir, name):
    found = []
    for entry in sorted(os.listdir(str(dump_dir))):
        if entry.startswith(name + "-"):
            with open(os.path.join(str(dump_dir), entry), encoding="utf-8") as handle:
                found.append(json.load(handle))
    return found


def environment_after_exec(pid, marker):
    """The environment of a process once it runs `marker` (before its exec it still shows npumon's)."""
    with open("/proc/{}/cmdline".format(pid), "rb") as handle:
        if marker.encode() not in handle.read():
            return None
    with open("/proc/{}/environ".format(pid), "rb") as handle:
        return dict(item.decode().split("=", 1) for item in handle.read().split(b"\0") if b"=" in item) or None


def assert_no_secret(environments):
    assert environments
    for env in environments:
        assert VISIBLE.items() <= env.items()
        assert not set(SECRETS) & set(env), sorted(set(SECRETS) & set(env))
        assert not [value for value in env.values() if any(secret in value for secret in SECRETS.values())]


def test_npu_smi_and_the_probe_under_npumon_check_see_no_secret_variable(tmp_path):
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    sim_state = str(tmp_path / "sim")
    prepare_simulation(sim_state, "healthy")
    # npu-smi: writes its environment, then answers as the simulator (so there are chips to probe)
    npu_smi = dump_env_script(tmp_path / "npu-smi", dump_dir, "npu-smi", """\
os.environ["NPUMON_SIM_STATE"] = {state!r}
os.execv(sys.executable, [sys.executable, "-m", "npumon.sim.npusmi"] + sys.argv[1:])""".format(state=sim_state))
    # the probe's interpreter: writes its environment and fails the probe
    python = dump_env_script(tmp_path / "probe-python", dump_dir, "probe", "sys.exit(1)")
    config = tmp_path / "npumon.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state", npu_smi=npu_smi, python=python))
    env = dict(os.environ, **SECRETS, **VISIBLE)
    proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "check", "--probe", "--config", str(config)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert "npu-smi" in proc.stdout and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert_no_secret(dumps(dump_dir, "npu-smi"))
    assert_no_secret(dumps(dump_dir, "probe"))


def test_a_spawn_gets_the_same_environment_without_the_secrets(tmp_path, monkeypatch):
    for name, value in dict(SECRETS, **VISIBLE).items():
        monkeypatch.setenv(name, value)
    config = tmp_path / "npumon.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state", npu_smi="npu-smi", python=sys.executable))
    load_config(str(config))  # loading the config is what names the secret variables
    seen = []

    def spawn(argv, env, timeout_seconds):
        seen.append(env)
        return CommandResult(argv, 0, "", "", 0.0)

    CommandRunner(["npu-smi"], timeout_seconds=5, env={"EXTRA": "1"}, spawn=spawn).run(["info"])
    assert_no_secret(seen)
    assert seen[0]["EXTRA"] == "1"


def test_the_fan_watchdog_and_its_command_see_no_secret_variable(tmp_path, monkeypatch):
    for name, value in dict(SECRETS, **VISIBLE).items():
        monkeypatch.setenv(name, value)
    config = tmp_path / "npumon.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state", npu_smi="npu-smi", python=sys.executable))
    load_config(str(config))
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    fan = dump_env_script(tmp_path / "fan-auto", dump_dir, "fan", "sys.exit(0)")
    watchdog = WatchdogProcess({"driver": "command", "command": [fan], "auto_command": [fan], "probe_command": [],
                                "timeout_seconds": 10}, "auto", 60)
    watchdog.start()
    try:
        own = wait_until(lambda: environment_after_exec(watchdog.pid, "npumon.services.control.watchdog"),
                         what="the watchdog running")
        watchdog._process.stdin.close()  # npumon gone without disarming: the watchdog hands the fans back
        watchdog._process.wait(30)
    finally:
        if watchdog.exit_status() is None:
            watchdog._process.kill()
            watchdog._process.wait(5)
    assert_no_secret([own])
    assert_no_secret(dumps(dump_dir, "fan"))


def test_child_environment_leaves_out_systemd_and_withheld_variables():
    withhold(["NPUMON_TEST_CHILD_WITHHELD"])
    inherited = dict(VISIBLE, NOTIFY_SOCKET="@x", WATCHDOG_USEC="1", WATCHDOG_PID="2", PATH="/usr/bin",
                     NPUMON_TEST_CHILD_WITHHELD="secret")
    env = child_environment({"EXTRA": "1"}, inherited)
    assert env == dict(VISIBLE, PATH="/usr/bin", EXTRA="1")
    assert not SYSTEMD_VARIABLES & set(env)
    assert "NPUMON_TEST_CHILD_WITHHELD" in inherited  # npumon's own environment is left as it is
