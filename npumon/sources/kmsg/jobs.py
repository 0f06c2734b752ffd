"""Job-wide faults: the same fault on two or more chips of one job within a short window is the job's, not the
chips'. Pure.

MindCluster's manual-isolation rule (ClusterD, RFC manual_fault_isolation; DefaultSlidingWindow 30 s): sorted
by time, the first fault is the anchor; the same fault on another device of the same job within 30 s of it
makes the anchor and every such fault in that window a software fault, not counted toward isolation. When a
job crashes, every chip it held logs the same error within seconds: one bad job is not eight bad chips.

A job here is a pod (the Kubernetes source's pod map: `pods` of a chip), a process npu-smi's table lists on
several chips (one PID holding them all), or a process group (torchrun's or mpirun's one process per chip
share their launcher's group; from /proc/<pid>/stat where npumon can read it). A fault on one chip alone, or
on one chip of a multi-chip job, stays the chip's.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ...model import ChipSample

WINDOW_SECONDS = 30.0
ChipKey = Tuple[int, int]


@dataclass(frozen=True)
class Occurrence:
    """The lines of one fault (class and code) on one chip, by time."""

    chip: ChipKey
    fault_class: str
    code: Optional[str]
    times: Tuple[float, ...]


@dataclass(frozen=True)
class JobFault:
    job: str  # "pod <namespace>/<name>", "pid <N>" or "process group <N>"
    fault_class: str
    code: Optional[str]
    chips: Tuple[ChipKey, ...]
    first: float
    last: float


def chip_jobs(chips: Sequence[ChipSample], groups: Optional[Dict[int, int]] = None) -> Dict[ChipKey, Tuple[str, ...]]:
    """The jobs holding each chip: its pods, the PIDs npu-smi lists on it, and their process groups
    (`groups`: pid -> process group, where known)."""
    jobs: Dict[ChipKey, Tuple[str, ...]] = {}
    for chip in chips:
        names = ["pod {}/{}".format(pod.get("namespace"), pod.get("pod"))
                 for pod in chip.extra.get("pods") or () if isinstance(pod, dict) and pod.get("pod")]
        names += ["pid {}".format(process.pid) for process in chip.processes]
        names += ["process group {}".format((groups or {})[process.pid]) for process in chip.processes
                  if (groups or {}).get(process.pid, 0) > 1]  # 0/1: no group of a job's own
        jobs[chip.key] = tuple(sorted(set(names)))
    return jobs


def process_group(stat: str) -> Optional[int]:
    """The process group in /proc/<pid>/stat ("pid (comm) state ppid pgrp ..."; comm may hold spaces and
    parentheses); None for text that is not one."""
    fields = stat[stat.rfind(")") + 1:].split()
    return int(fields[2]) if stat.rfind(")") > 0 and len(fields) > 2 and fields[2].isdigit() else None


def correlate(occurrences: Sequence[Occurrence], jobs: Dict[ChipKey, Tuple[str, ...]],
              window: float = WINDOW_SECONDS) -> List[JobFault]:
    """The job faults: per job (pods before processes) and per fault, every anchor-window with lines from two
    or more of the job's chips. A fault already given to a job is not given to another (a pod and its
    process are one job), but still counts among a wider job's chips: a process holding one chip beyond a
    pod's (seen in the simulator when a job's chips straddle two pods) makes that chip's fault its job's too."""
    found: List[JobFault] = []
    claimed: Set[Tuple[ChipKey, str, Optional[str]]] = set()
    # a pod first, then one process, then a process group: the narrowest name of one job
    order = ("pod", "pid", "process group")
    names = sorted({job for held in jobs.values() for job in held},
                   key=lambda job: (next(n for n, kind in enumerate(order) if job.startswith(kind)), job))
    for job in names:
        members = {chip for chip, held in jobs.items() if job in held}
        if len(members) < 2:
            continue
        events: Dict[Tuple[str, Optional[str]], List[Tuple[float, ChipKey]]] = {}
        for occurrence in occurrences:
            if occurrence.chip in members:
                events.setdefault((occurrence.fault_class, occurrence.code), []).extend(
                    (time, occurrence.chip) for time in occurrence.times)
        for (fault_class, code), lines in sorted(events.items(), key=lambda item: (item[0][0], item[0][1] or "")):
            chips, times = _together(sorted(lines), window)
            if any((chip, fault_class, code) not in claimed for chip in chips):
                found.append(JobFault(job, fault_class, code, tuple(sorted(chips)), min(times), max(times)))
                claimed.update((chip, fault_class, code) for chip in chips)
    return found


def _together(lines: List[Tuple[float, ChipKey]], window: float) -> Tuple[Set[ChipKey], List[float]]:
    """The chips (and times) of every window, from an anchor line, that holds lines of two or more chips."""
    chips: Set[ChipKey] = set()
    times: List[float] = []
    start = 0
    while start < len(lines):
        anchor = lines[start][0]
        end = start
        while end < len(lines) and lines[end][0] <= anchor + window:
            end += 1
        inside = lines[start:end]
        if len({chip for _, chip in inside}) >= 2:
            chips.update(chip for _, chip in inside)
            times.extend(time for time, _ in inside)
            start = end
        else:
            start += 1
    return chips, times
