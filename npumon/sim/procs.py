"""The simulated host's NPU processes in its fake /proc: /proc/<pid>/stat, task/<pid>/stat, comm and fd/ for
every process a scenario puts on a chip, as the processes source (sources/procs/) reads them on a real host.

CPU time accumulates at each process's `cpu_percent` at scenario time (default DEFAULT_CPU_PERCENT: a process
feeding an NPU keeps about one CPU busy) over wall time, kept exactly in <root>/.sim/procs.json so that many small steps
add up; `state` (default S) is the state letter. A process's fd/ holds what a real NPU process has open:
/dev/davinci_manager, /dev/devmm_svm and /dev/davinciN of each chip it runs on. write_processes runs before each
read (the simulated Target's proc_before_read), so the files show the moment of the read.
"""

import contextlib
import fcntl
import json
import os
import shutil
from typing import Any, Dict, Iterator

from .hostroot import USER_HZ
from .products import get_product
from .state import read_state, scenario_time
from .values import chip_phase, chip_present_at, evaluate, process_pid, resolved_chip_expressions

DEFAULT_CPU_PERCENT = 85.0
DEFAULT_STATE = "S"
# A process first seen has run this long already (its CPU time is not zero), since this long after boot.
STARTED_SECONDS_AGO = 600.0
START_AFTER_BOOT_SECONDS = 3000.0
_RECORD = "procs.json"
_LOCK = "procs.lock"
_OTHER_FILES = ("/dev/null", "/dev/null", "/dev/null", "/dev/davinci_manager", "/dev/devmm_svm")
_static_written: Dict[str, Any] = {}  # process directory -> (comm, fd links) this process wrote there last


def write_processes(state_dir: str, now: float) -> None:
    """Bring <root>/proc/<pid> of every simulated NPU process to wall time `now`; remove those gone."""
    state = read_state(state_dir)
    t = scenario_time(state, now)
    root = state["root"]
    wanted = _processes_at(state, t)
    sim_dir = os.path.join(root, ".sim")
    os.makedirs(sim_dir, exist_ok=True)
    with _locked(os.path.join(sim_dir, _LOCK)):
        record = _load(os.path.join(sim_dir, _RECORD))
        cpu: Dict[str, float] = record.get("cpu", {})
        # wall time, as the host's /proc/stat (sim/npusmi.py): a frozen scenario clock keeps its processes running
        elapsed = max(0.0, now - record.get("now", now))
        for pid, process in wanted.items():
            key = str(pid)
            rate = process["cpu_percent"] / 100.0
            cpu[key] = cpu[key] + rate * elapsed if key in cpu else rate * STARTED_SECONDS_AGO
            _write_process(root, pid, process, cpu[key])
        for key in [key for key in cpu if int(key) not in wanted]:
            _remove_process(root, key)
            del cpu[key]
        _save(os.path.join(sim_dir, _RECORD), {"now": max(now, record.get("now", now)), "cpu": cpu})


def reset_processes(root: str) -> None:
    """A new simulation under `root`: no processes, no CPU time from an earlier run's."""
    record = _load(os.path.join(root, ".sim", _RECORD))
    for key in record.get("cpu", {}):
        _remove_process(root, key)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(root, ".sim", _RECORD))


def _remove_process(root: str, pid: str) -> None:
    directory = os.path.join(root, "proc", pid)
    shutil.rmtree(directory, ignore_errors=True)
    _static_written.pop(directory, None)  # what this process wrote there is gone with it


def _processes_at(state: Dict[str, Any], t: float) -> Dict[int, Dict[str, Any]]:
    """pid -> name, cpu_percent, state and the logical ids of the chips it runs on."""
    product = get_product(state["product"])
    chips_spec = state["scenario"]["chips"]
    wanted: Dict[int, Dict[str, Any]] = {}
    for slot in product.slots():
        if not chip_present_at(chips_spec, slot.device_id, t):
            continue
        expressions = resolved_chip_expressions(chips_spec, slot.device_id, product.aicore_rated_mhz)["processes"]
        for index, spec in enumerate(expressions):
            pid = process_pid(spec, slot.device_id, index)
            percent = float(evaluate(spec.get("cpu_percent", DEFAULT_CPU_PERCENT), t, chip_phase(slot.device_id)))
            process = wanted.setdefault(pid, {"name": spec["name"], "cpu_percent": max(0.0, percent),
                                              "state": evaluate(spec.get("state", DEFAULT_STATE), t), "devices": []})
            process["devices"].append(slot.device_id)
    return wanted


def _write_process(root: str, pid: int, process: Dict[str, Any], cpu_seconds: float) -> None:
    directory = os.path.join(root, "proc", str(pid))
    ticks = int(cpu_seconds * USER_HZ)
    utime, stime = ticks * 9 // 10, ticks - ticks * 9 // 10  # mostly user time, as a feeding process spends it
    comm = process["name"][:15]  # the kernel keeps 15 characters of a command name (TASK_COMM_LEN)
    start = int((START_AFTER_BOOT_SECONDS + pid % 997) * USER_HZ)
    # proc(5) fields 1-52: pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice num_threads itrealvalue starttime vsize rss, then the rest as 0
    fields = [process["state"], 1, pid, pid, 0, -1, 4194560, 182340, 0, 12, 0, utime, stime, 0, 0, 20, 0, 64, 0,
              start, 34359738368, 2097152] + [0] * 30
    line = "{} ({}) {}\n".format(pid, comm, " ".join(str(f) for f in fields))
    _replace(os.path.join(directory, "stat"), line)
    links = list(_OTHER_FILES) + ["/dev/davinci{}".format(device) for device in sorted(process["devices"])]
    fd_dir = os.path.join(directory, "fd")
    # The name, the main thread's stat and the open devices rarely change: left as they are when this process
    # wrote them last and they are still there (a host's /proc costs its reader nothing; the simulator's runs
    # in the reader, a rename costs about 0.2 ms of it).
    static = (comm, tuple(links))
    thread_stat = os.path.join(directory, "task", str(pid), "stat")
    if _static_written.get(directory) == static and os.path.lexists(os.path.join(fd_dir, str(len(links) - 1))) \
            and os.path.exists(os.path.join(directory, "comm")) and os.path.exists(thread_stat):
        return
    _replace(os.path.join(directory, "comm"), comm + "\n")
    # its one thread, the main one: the process's own stat, as a link that follows every rewrite of it
    os.makedirs(os.path.dirname(thread_stat), exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(thread_stat)
    os.symlink(os.path.join("..", "..", "stat"), thread_stat)
    os.makedirs(fd_dir, exist_ok=True)
    for name in os.listdir(fd_dir):
        if not name.isdigit() or int(name) >= len(links):
            os.unlink(os.path.join(fd_dir, name))
    for number, target in enumerate(links):
        path = os.path.join(fd_dir, str(number))
        if os.path.islink(path) and os.readlink(path) == target:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.symlink(target, path)
    _static_written[directory] = static


def _replace(path: str, text: str) -> None:
    """Write whole (a temporary file renamed over it): a reader sees the old or the new file."""
    temporary = path + ".tmp"
    try:
        handle = open(temporary, "w", encoding="utf-8")
    except FileNotFoundError:  # the process's first write
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle = open(temporary, "w", encoding="utf-8")
    with handle:
        handle.write(text)
    os.replace(temporary, path)


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def _load(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (FileNotFoundError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _save(path: str, record: Dict[str, Any]) -> None:
    _replace(path, json.dumps(record))

