"""Running the diag children: one per chip, in its own process group, killed at its deadline.

`run_children(plans, ...)` starts up to `parallel` children at once, reads each one's stderr for the item it
is on (for the progress line, and to name the item that never finished), and returns one ChipRun per plan.
"""

import json
import os
import signal
import subprocess
import threading
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from .judge import ChipRun
from .protocol import ITEM_START, SCHEMA

CHILD_MODULE = "npumon.diag.child"
MAX_OUTPUT = 1 << 20  # a report is a few KiB; more is a broken child, not something to keep
MAX_LINE = 1 << 16


class ChildPlan(NamedTuple):
    run: ChipRun  # subject, device, expected, link: the report is filled in
    argv: List[str]


def child_argv(python: str, device: int, level: int, options: Dict[str, object], peer: Optional[int],
               items: Sequence[str]) -> List[str]:
    argv = [python, "-m", CHILD_MODULE, "--device", str(device), "--level", str(level), "--items", ",".join(items)]
    for name, value in sorted(options.items()):
        if value is not None:
            argv += ["--" + name.replace("_", "-"), str(value)]
    if peer is not None:
        argv += ["--peer", str(peer)]
    return argv


def run_children(plans: List[ChildPlan], env: Dict[str, str], deadline_seconds: float, parallel: int,
                 on_item: Callable[[str, str], None] = lambda subject, item: None) -> List[ChipRun]:
    """Every plan's ChipRun with its report, or why it has none; never raises for a child's failure."""
    results: Dict[int, ChipRun] = {}
    slots = threading.Semaphore(max(1, parallel))

    def one(index: int, plan: ChildPlan) -> None:
        with slots:
            results[index] = _run_one(plan, env, deadline_seconds, on_item)

    threads = [threading.Thread(target=one, args=(index, plan), name="diag-" + plan.run.subject, daemon=True)
               for index, plan in enumerate(plans)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[index] for index in range(len(plans))]


def _run_one(plan: ChildPlan, env: Dict[str, str], deadline_seconds: float,
             on_item: Callable[[str, str], None]) -> ChipRun:
    run = plan.run
    try:
        child = subprocess.Popen(plan.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                 env=env, start_new_session=True)
    except OSError as exc:
        return run._replace(error="cannot start the diag child: {}".format(exc.strerror or exc))
    current: List[Optional[str]] = [None]
    stdout: List[bytes] = []

    def read_stderr() -> None:
        for raw in iter(lambda: child.stderr.readline(MAX_LINE), b""):  # a line longer than MAX_LINE comes in parts
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith(ITEM_START):
                current[0] = line[len(ITEM_START):]
                on_item(run.subject, current[0])

    def read_stdout() -> None:
        stdout.append(child.stdout.read(MAX_OUTPUT))
        while child.stdout.read(MAX_LINE):  # drop what a broken child prints past the cap; it never blocks
            pass

    readers = [threading.Thread(target=read_stderr, daemon=True), threading.Thread(target=read_stdout, daemon=True)]
    for reader in readers:
        reader.start()
    started = time.monotonic()
    try:
        child.wait(timeout=deadline_seconds)
    except subprocess.TimeoutExpired:
        _kill_group(child)
        for reader in readers:
            reader.join(timeout=5)
        return run._replace(error="{:g} s".format(time.monotonic() - started), stuck_item=current[0])
    for reader in readers:
        reader.join(timeout=5)
    text = b"".join(stdout).decode("utf-8", "replace").strip()
    try:
        report = json.loads(text.splitlines()[-1]) if text else None
    except ValueError:
        report = None
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        return run._replace(error="the diag child exited {} without a report".format(child.returncode))
    return run._replace(report=report)


def _kill_group(child: subprocess.Popen) -> None:
    """Kill the child and everything it started (a hung runtime may have threads or helpers), and reap it."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        child.kill()
    child.wait()
