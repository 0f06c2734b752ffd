"""A misbehaving npu-smi for daemon tests: a real executable whose behaviour a file beside it sets (answer a
real capture, flood 50 MiB, hang, hang behind a helper that leaves the process group, answer after starting a
helper that detaches completely), and the config and
fake host tree to run `npumon run` against it. Every process it starts carries its path in its argv."""

import os
import signal
import sys
import textwrap
import time
from typing import List, Optional

import psutil

from npumon.sim.hostroot import HostRootSpec, write_host_root
from paths import FIXTURES

SCRIPT = textwrap.dedent("""\
    #!{python} -S
    import os, sys, time
    here = os.path.dirname(os.path.abspath(__file__))
    args = sys.argv[1:]
    mode = open(os.path.join(here, "mode")).read().strip()
    if "-t" in args:
        print("This device does not support querying {{}}.".format(args[args.index("-t") + 1]))
        sys.exit(0)
    if mode == "flood":  # 50 MiB of table-like rows
        chunk = b"| 0     910B3               | OK            | 95.0        48                0    / 0 |\\n" * 11000
        for _ in range(50 * 1024 * 1024 // len(chunk) + 1):
            sys.stdout.buffer.write(chunk)
    elif mode == "hang":
        time.sleep(300)
    elif mode == "escape":  # a helper leaves the process group and hangs; so does npu-smi
        if os.fork() == 0:
            os.setsid()
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", __file__ + "-helper"])
        time.sleep(300)
    else:
        if mode == "vanish" and not os.path.exists(os.path.join(here, "helper-started")):
            open(os.path.join(here, "helper-started"), "w").close()
            # One helper detaches completely: a session of its own, no stdio, no environment, its parent gone.
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    null = os.open(os.devnull, os.O_RDWR)
                    for fd in (0, 1, 2):
                        os.dup2(null, fd)
                    os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)",
                                               __file__ + "-helper"], {{}})
                os._exit(0)
            os.wait()
        sys.stdout.write(open(os.path.join(here, "info.txt")).read())
    """)

FAST_POLLS = """\
npu_smi: {npu_smi}
root: {root}
state_dir: {state}
npu_smi_timeout_seconds: {timeout}
poll: {{table_seconds: 0.3, usages_seconds: 0, power_seconds: 0, health_seconds: 0, ecc_seconds: 0,
       board_seconds: 0, host_seconds: 1}}
probe: {{enabled: false}}
"""


class FakeNpuSmi:
    def __init__(self, directory: str, capture: str = "info_910b3_8npu_v23.0.7.txt"):
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, "npu-smi")
        with open(os.path.join(FIXTURES, capture), encoding="utf-8") as handle:
            info = handle.read().split("# ---\n", 1)[1]
        info = info.split("\n", 1)[1]  # the capture's command line is not npu-smi's output
        with open(os.path.join(directory, "info.txt"), "w", encoding="utf-8") as handle:
            handle.write(info)
        with open(self.path, "w", encoding="utf-8") as handle:
            handle.write(SCRIPT.format(python=sys.executable))
        os.chmod(self.path, 0o755)
        self.behave("answer")

    def behave(self, mode: str) -> None:
        with open(os.path.join(os.path.dirname(self.path), "mode"), "w", encoding="utf-8") as handle:
            handle.write(mode)

    def processes(self, started_before: Optional[float] = None) -> List[int]:
        """Live processes it started (zombies excluded: they are dead, and init's to reap); with
        `started_before` (a time.time()), only those started before it."""
        found = []
        for proc in psutil.process_iter(["cmdline", "status", "create_time"]):
            cmdline = proc.info["cmdline"] or []
            if any(self.path in part for part in cmdline) and proc.info["status"] != psutil.STATUS_ZOMBIE and \
                    (started_before is None or proc.info["create_time"] < started_before):
                found.append(proc.pid)
        return found

    def wait_gone(self, within: float, started_before: Optional[float] = None) -> List[int]:
        """The processes (started before `started_before`, if given) still alive after at most `within` s."""
        deadline = time.monotonic() + within
        while self.processes(started_before) and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.processes(started_before)

    def kill_all(self) -> None:
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def config(self, directory: str, timeout: float = 5.0) -> str:
        """A config for `npumon run` against this npu-smi and a fake host tree; its path."""
        root = os.path.join(directory, "root")
        write_host_root(root, HostRootSpec(device_count=8))
        path = os.path.join(directory, "npumon.yaml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(FAST_POLLS.format(npu_smi=self.path, root=root, state=os.path.join(directory, "state"),
                                           timeout=timeout))
        return path


def peak_rss_bytes(pid: int) -> int:
    """VmHWM: the most resident memory the process has held."""
    with open("/proc/{}/status".format(pid), encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM for pid {}".format(pid))
