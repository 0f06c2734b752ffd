"""`npumon top` on the simulated host and against a real daemon over loopback HTTP: one `--once` as a real
subprocess, the other plain-output tests through main() in-process (the `cli` fixture), and the live screen in a
real terminal (tmux), read back with `capture-pane`."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

CHIP_ROW = re.compile(r"^(\d+)\s+(\d+)\s+910B3\s")


def npumon(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "npumon.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def chip_rows(screen):
    return [line for line in screen.splitlines() if CHIP_ROW.match(line)]


def test_once_prints_every_chip_the_finding_with_its_hint_and_the_sources():
    proc = npumon("top", "--simulate=overheat", "--once")
    assert (proc.returncode, proc.stderr) == (0, "")
    screen = proc.stdout
    assert screen.startswith("npumon top | host sim-host | 8 chips | CRITICAL | read ")
    assert [CHIP_ROW.match(line).group(1) for line in chip_rows(screen)] == [str(n) for n in range(8)]
    assert re.search(r"CRITICAL  npu0/chip0 +temperature-critical: temperature 8\d C", screen)
    assert "hint: Check the airflow first" in screen
    assert re.search(r"^  npu-smi +ok +last success \d+s ago$", screen, re.M)
    assert "q quit" not in screen  # the key line is for the live screen only


def test_once_sorts_and_filters_as_asked(cli):
    proc = cli("top", "--simulate=overheat", "--once", "--sort", "temp", "--filter", "npu1/chip0")
    assert proc.returncode == 0
    assert [CHIP_ROW.match(line).group(1) for line in chip_rows(proc.stdout)] == ["1"]
    assert "filter: npu1/chip0 (1 of 8 chips)" in proc.stdout


def test_without_a_terminal_it_prints_a_plain_table_every_interval(cli):
    started = time.monotonic()
    proc = cli("top", "--simulate", "--interval", "0.5", "--count", "3")
    assert proc.returncode == 0, proc.stderr
    frames = proc.stdout.split("\n\nnpumon top | ")
    assert len(frames) == 3 and all(len(chip_rows(frame)) == 8 for frame in frames)
    assert time.monotonic() - started >= 1.0  # three frames 0.5 s apart


def test_reads_a_running_daemon_and_the_daemon_exports_process_memory(daemons, tmp_path, cli):
    config = tmp_path / "npumon.yaml"
    config.write_text("exporter:\n  process_series_per_chip: 0\n")
    daemon = daemons("--simulate", "--listen", "127.0.0.1:0", "--config", str(config))
    daemon.wait_serving()
    deadline = time.monotonic() + 30
    while daemon.get("/status").json().get("error") and time.monotonic() < deadline:
        time.sleep(0.2)  # the first poll has not finished
    proc = cli("top", "--url", daemon.url("/status"), "--once")
    assert proc.returncode == 0, proc.stderr
    assert len(chip_rows(proc.stdout)) == 8 and daemon.url("/status") in proc.stdout.splitlines()[0]
    metrics = daemon.get("/metrics").text
    # 0 series per process: the memory of every chip's processes is in the sum alone
    assert "npumon_chip_process_memory_bytes{" not in metrics
    assert re.search(r'^npumon_chip_process_memory_other_bytes\{chip="0",npu="0"\} [1-9]', metrics, re.M)


def test_a_daemon_that_is_not_there_or_is_not_npumon_is_one_line(cli):
    proc = cli("top", "--url", "http://127.0.0.1:1/status", "--once")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("npumon top: cannot read http://127.0.0.1:1/status: connection refused "
                           "(is `npumon run` up?)\n")


@pytest.mark.parametrize("args,message", [
    (["--url", "http://127.0.0.1:1/status", "--simulate"], "--url reads a daemon"),
    (["--sim-product", "atlas-a3"], "--sim-product needs --simulate"),
    (["--probe"], "--probe needs --local or --simulate"),
    (["--simulate=no-such-scenario", "--once"], "no-such-scenario"),
])
def test_bad_usage_is_one_line(args, message, cli):
    proc = cli("top", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("value", ["0.1", "61", "nan", "x"])
def test_interval_out_of_range_is_refused(value, cli):
    proc = cli("top", "--simulate", "--interval", value)
    assert proc.returncode == 2 and "--interval: must be a number of seconds from 0.5 to 60" in proc.stderr


# --- the live screen, in tmux ------------------------------------------------------------------------------


class Tmux:
    """A tmux server of our own (its own socket), so the test never touches another tmux session."""

    def __init__(self):
        self.directory = tempfile.mkdtemp(prefix="npumon-tmux-")  # short: a socket path has ~100 bytes
        self.socket = os.path.join(self.directory, "s")

    def run(self, *args):
        return subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, timeout=10)

    def screen(self):
        return self.run("capture-pane", "-p", "-t", "top").stdout

    def wait_for(self, what, predicate, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError("no {} within {}s; screen:\n{}".format(what, timeout, screen))
            time.sleep(0.2)

    def close(self):
        self.run("kill-server")
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.skip("tmux not on PATH (Debian: apt-get install tmux)")
    server = Tmux()
    yield server
    server.close()


def aicore_percentages(screen):
    """The AICORE column of each chip row: the first bar's percentage."""
    return [int(re.search(r"\]\s+(\d+)%", line).group(1)) for line in chip_rows(screen)]


@pytest.mark.integration
def test_live_screen_in_a_terminal_sorts_on_a_key_and_quits_cleanly(tmux):
    exit_file = os.path.join(tmux.directory, "rc")
    command = "{} -m npumon.cli.main top --simulate=overheat --interval 1; echo $? > {}; echo TOP-ENDED".format(
        sys.executable, exit_file)
    started = tmux.run("new-session", "-d", "-s", "top", "-x", "160", "-y", "50", "sh", "-c", command + "; sleep 60")
    assert started.returncode == 0, started.stderr
    screen = tmux.wait_for("every chip row and the finding", lambda s: len(chip_rows(s)) == 8
                           and "temperature-critical" in s)
    assert re.match(r"npumon top \| host \S+ \| 8 chips \| CRITICAL \| read \d+s ago \| simulated overheat", screen)
    assert re.search(r"CRITICAL  npu0/chip0 +temperature-critical: temperature 8\d C, at or above the critical 85 C",
                     screen)
    assert [CHIP_ROW.match(line).group(1) for line in chip_rows(screen)] == [str(n) for n in range(8)]
    assert screen.splitlines()[-1].startswith("q quit") or "q quit" in screen
    tmux.run("send-keys", "-t", "top", "u")  # sort by AI Core, busiest first
    screen = tmux.wait_for("the AI Core sort", lambda s: "sort: AI Core" in s and len(chip_rows(s)) == 8)
    order = [CHIP_ROW.match(line).group(1) for line in chip_rows(screen)]
    assert order != [str(n) for n in range(8)]  # in this scenario chip 0 is not the busiest
    busy = aicore_percentages(screen)
    assert busy == sorted(busy, reverse=True)
    tmux.run("send-keys", "-t", "top", "Enter")  # the selected (first, busiest) chip's detail
    screen = tmux.wait_for("the chip detail", lambda s: "HISTORY" in s and "PROCESSES (1)" in s)
    # (the busiest chip may have changed with the readings since: any chip's detail it is)
    assert re.search(r"^CHIP npu[0-7]/chip0  910B3  health OK", screen, re.M) and "VLLMEngineCore" in screen
    tmux.run("send-keys", "-t", "top", "Escape")
    tmux.wait_for("the chip rows after the detail", lambda s: len(chip_rows(s)) == 8)
    tmux.run("send-keys", "-t", "top", "q")
    tmux.wait_for("the end of top", lambda s: "TOP-ENDED" in s, timeout=15)
    with open(exit_file) as rc:
        assert rc.read().strip() == "0"
    assert "npumon top |" not in tmux.screen()  # the terminal's own screen is back


@pytest.mark.integration
def test_live_screen_survives_a_tiny_resize_and_ctrl_c_ends_it_with_0(tmux):
    exit_file = os.path.join(tmux.directory, "rc")
    # the shell traps SIGINT (a trap, not an ignore: top still gets the default) so that it outlives Ctrl-C
    command = "trap true INT; {} -m npumon.cli.main top --simulate --interval 1; echo $? > {}; echo TOP-ENDED".format(
        sys.executable, exit_file)
    tmux.run("new-session", "-d", "-s", "top", "-x", "160", "-y", "50", "sh", "-c", command + "; sleep 60")
    tmux.wait_for("the chip rows", lambda s: len(chip_rows(s)) == 8)
    tmux.run("resize-window", "-t", "top", "-x", "30", "-y", "6")
    tmux.wait_for("the small frame", lambda s: "more line" in s or "q quit" in s)
    tmux.run("resize-window", "-t", "top", "-x", "160", "-y", "50")
    tmux.wait_for("the chip rows again", lambda s: len(chip_rows(s)) == 8)
    tmux.run("send-keys", "-t", "top", "C-c")
    tmux.wait_for("the end of top", lambda s: "TOP-ENDED" in s, timeout=15)
    with open(exit_file) as rc:
        assert rc.read().strip() == "0"
    assert "Traceback" not in tmux.screen()
