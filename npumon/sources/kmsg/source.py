"""The kernel-log source: the Ascend driver's fault lines, as events and findings.

It reads /dev/kmsg (`faults.kmsg: true`) or a file of kernel log lines (`faults.kmsg_path`), matches each
new line against the fault patterns (npumon/faults/patterns.yaml and the users' files), and counts what it
finds per (device, fault class) in a bounded book (book.py). Each fault is put on its chip -- the driver's
device id is the chip's logical id (ChipSample.device_id; where npu-smi gave no ids, the chips' order) --
or, when no chip in the table has that id (a card that dropped out), on the host. A line that names no device
is the chip's whose npu-smi health reports the line's code; else it stays an unattributed note on the host.
The same fault on two or more chips of one job within 30 s is the job's (jobs.py): it leaves the chips'
facts for the host's `job_faults`. The rules (`driver-*-fault`, `job-fault`, builtin.yaml) turn them into
findings with the repair action.

The daemon resumes where it stopped (state.py: boot id + sequence number, or file inode + offset); a new
boot id means a reboot, which clears the device and transient faults and keeps the hardware ones.
`npumon check` reads the whole log once and writes nothing. Line formats: hicann/driver dmc_log.h and the
format strings named in patterns.yaml (the reference's faults/FAULTS.md §2).
"""

import dataclasses
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...faults.patterns import LineFault, Pattern, load_patterns, match_line
from ...model import ChipSample, Snapshot
from ...outputs.families import Families, MetricSpec
from ..base import Parts, Section, SingleTierSource, SourceContext, SourceError, SourceSpec
from .book import Entry, FaultBook
from .config import FaultsConfig, faults_config_problems
from .facts import EXTRA_KEY, JOB_FAULTS_KEY, STATS_KEY, chip_facts, host_facts
from .jobs import WINDOW_SECONDS as JOB_WINDOW_SECONDS, Occurrence, chip_jobs, correlate, process_group
from ..runner import CommandRunner
from .journal import MAX_OUTPUT_BYTES as JOURNAL_MAX_OUTPUT_BYTES, TIMEOUT_SECONDS as JOURNAL_TIMEOUT_SECONDS, \
    JournalReader
from .reader import KmsgDevice, LogFile, ReadError
from .records import Record, line_time
from .state import BOOT_ID_PATH, load_state, read_boot_id, save_state

log = logging.getLogger(__name__)

NAME = "kmsg"
KMSG_DEVICE = "dev/kmsg"
ONE_PASS_MAX_RECORDS = 2000000  # `npumon check` reads the whole log, but not without end
MORE_LEFT_RETRY_SECONDS = 1.0
ChipKey = Tuple[int, int]


class KmsgSource(SingleTierSource[Dict[str, int]]):
    name = NAME
    judged = True  # driver faults

    def __init__(self, config: FaultsConfig, root: str, state_dir: Optional[str], patterns: Sequence[Pattern],
                 clock=time.time, max_age: float = 120.0, device: Optional[KmsgDevice] = None,
                 before_read: Optional[Callable[[float], Any]] = None, journal: Optional[JournalReader] = None):
        """`state_dir` None: one pass (`npumon check`), from the start of the log, nothing saved; `device`:
        the /dev/kmsg reader (a test's stands in for the kernel); `before_read(now)`: the target's
        kernel writing the lines due (Target.kernel_log); `journal`: the reader to fall back to where /dev/kmsg
        is not readable (None: no fallback)."""
        super().__init__(config.interval_seconds, max_age, clock)
        self.config = config
        self.patterns = list(patterns)
        self.before_read = before_read
        self.journal = journal if config.journal_fallback else None
        self._use_journal = False
        self.state_dir = state_dir
        self.boot_id = read_boot_id(os.path.join(root, BOOT_ID_PATH))
        self.file = LogFile(config.kmsg_path) if config.kmsg_path else None
        self.device = None if self.file else device or KmsgDevice(os.path.join(root, KMSG_DEVICE))
        self.book = FaultBook(config.rate_limit_per_minute, config.max_faults, config.hold_seconds,
                              config.repeat_window_seconds)
        self.stats = {"records": 0, "matched": 0, "lost": 0, "suppressed": 0, "reboots": 0}
        self._cursor: Dict[str, Any] = {}
        self._chip_of_device: Dict[int, ChipKey] = {}  # kept after a chip drops out of the table
        self._proc = os.path.join(root, "proc")
        self._groups: Dict[int, int] = {}  # pid -> process group, of the processes npu-smi lists now
        # (chip, fault class, code, first seen) -> the job its lines were found to be: a crashed job's process
        # exits, and its held lines must not then be judged chip by chip (every chip of the job out of service)
        self._job_of: Dict[Tuple[ChipKey, str, Optional[str], float], str] = {}
        self._lock = threading.Lock()
        self._restore()

    # -- resuming -------------------------------------------------------------------------------------

    def _restore(self) -> None:
        if self.state_dir is None:
            return
        state = load_state(self.state_dir)
        self.book.restore(state.get("faults"))
        self._chip_of_device = {int(device): (int(key[0]), int(key[1]))
                                for device, key in (state.get("chips") or {}).items()
                                if str(device).isdigit() and isinstance(key, list) and len(key) == 2}
        # A boot id that cannot be read (a container without /proc/sys/kernel) says nothing about reboots.
        same_boot = state.get("boot_id") == self.boot_id or None in (state.get("boot_id"), self.boot_id)
        if state and not same_boot:
            cleared = self.book.after_reboot()
            self.stats["reboots"] += 1
            log.info("kmsg: the host rebooted since the last run; %d device/transient faults cleared", cleared)
        cursor = state.get("cursor") if isinstance(state.get("cursor"), dict) else {}
        if self.file is not None and cursor.get("path") == self.file.path:
            self._cursor = cursor  # a file outlives a reboot
        elif self.file is None and same_boot:
            self._cursor = cursor

    def _save(self) -> Optional[str]:
        if self.state_dir is None:
            return None
        return save_state(self.state_dir, {
            "boot_id": self.boot_id, "cursor": self._cursor, "faults": self.book.to_json(),
            "chips": {str(device): list(key) for device, key in self._chip_of_device.items()}})

    # -- polling --------------------------------------------------------------------------------------

    def read(self, chips: Sequence[ChipSample]) -> Dict[str, int]:
        if self.before_read is not None:
            self.before_read(self.clock())
        self._learn_chips(chips)
        passes = ONE_PASS_MAX_RECORDS // self.config.max_records_per_poll if self.state_dir is None else 1
        more = False
        for _ in range(max(1, passes)):
            more = self._read_once()
            if not more:
                break
        self._more_left = more
        problem = self._save()
        if problem:  # a failing disk fails every poll: one line, then one per interval with a count
            self.repeats.log(logging.WARNING, "save", "kmsg: cannot save where it stopped: %s", problem)
        else:
            self.repeats.clear("save")
        with self._lock:
            return dict(self.stats)

    def poll(self, tier: str, chips: Sequence[ChipSample]) -> Optional[float]:
        self._more_left = False
        super().poll(tier, chips)
        return MORE_LEFT_RETRY_SECONDS if self._more_left else None

    def _read_once(self) -> bool:
        limit = self.config.max_records_per_poll
        try:
            if self.file is not None:
                records, inode, offset, more = self.file.read(self._cursor.get("inode"),
                                                              int(self._cursor.get("offset") or 0), limit)
                cursor = {"path": self.file.path, "inode": inode, "offset": offset}
                lost = 0
            elif self._use_journal:
                records, journal_cursor, lost = self.journal.read(self._cursor.get("journal"), limit)
                cursor, more = dict(self._cursor, journal=journal_cursor), False
            else:
                records, lost, more = self.device.read(self._cursor.get("seq"), limit)
                cursor = dict(self._cursor, seq=records[-1].seq) if records else self._cursor
        except ReadError as exc:
            if exc.denied and self.journal is not None and not self._use_journal:
                log.info("kmsg: %s; reading the kernel log from the journal instead", exc)
                self._use_journal = True
                return self._read_once()
            raise SourceError(str(exc)) from None
        now = self.clock()
        with self._lock:
            self._cursor = cursor
            self.stats["records"] += len(records)
            self.stats["lost"] += lost
            for record in records:
                fault = match_line(record.message, self.patterns)
                if fault is None:
                    continue
                self.stats["matched"] += 1
                self.book.add(_with_record_device(fault, record.fields), record.message, now,
                              self._line_time(record, now))
            self.stats["suppressed"] = self.book.suppressed_total
        return more

    def _line_time(self, record: Record, now: float) -> Optional[float]:
        """The line's own time; for a line without one, when the daemon read it (it reads as lines come), but
        none in one pass over a whole log (`npumon check`), where the reading time says nothing."""
        logged = line_time(record)
        return now if logged is None and self.state_dir is not None else logged

    def fingerprint(self, value: Dict[str, int]) -> Any:
        """New lines that are not driver faults (most of a kernel log) give the rules nothing new to judge."""
        return value["matched"], value["lost"], value["reboots"]

    def warning(self, value: Dict[str, int]) -> Optional[str]:
        if value.get("lost"):
            return "{} kernel log records were overwritten before they could be read".format(value["lost"])
        return None

    def _learn_chips(self, chips: Sequence[ChipSample]) -> None:
        with self._lock:
            for device, key in _chip_by_device(chips).items():
                self._chip_of_device[device] = key
        groups = {}
        for pid in {process.pid for chip in chips for process in chip.processes}:
            group = self._groups.get(pid)
            groups[pid] = group if group is not None else _read_process_group(self._proc, pid)
        with self._lock:
            self._groups = {pid: group for pid, group in groups.items() if group is not None}

    # -- the snapshot ---------------------------------------------------------------------------------

    def contribute(self, parts: Parts, now: float) -> Parts:
        with self._lock:
            entries = self.book.active(now)
            known = dict(self._chip_of_device)
            groups = dict(self._groups)
            stats = dict(self.stats)
        known.update(_chip_by_device(parts.chips))
        by_bus = {chip.bus_id.lower(): chip.key for chip in parts.chips if chip.bus_id}
        present = {chip.key for chip in parts.chips}
        per_chip: Dict[ChipKey, List[Dict[str, Any]]] = {}
        on_host: List[Dict[str, Any]] = []
        for entry in entries:
            key, attribution = _attribute(entry, known, by_bus, parts.chips)
            fault = _fault_dict(entry, key if key not in present else None, now, self.config.repeat_window_seconds)
            fault["attribution"] = attribution
            if key in present:
                per_chip.setdefault(key, []).append(fault)
            else:
                if attribution == "code":  # several chips report the code: the line cannot tell which
                    fault["place"] = "one of {} (they report {})".format(
                        ", ".join(chip.subject for chip in parts.chips if entry.code in chip.error_codes),
                        entry.code)
                on_host.append(fault)
        jobs = chip_jobs(parts.chips, groups)
        job_faults = _job_faults(per_chip, parts.chips, jobs)
        with self._lock:
            self._job_of = _remember_jobs(per_chip, self._job_of)
        if self.state_dir is not None:  # polling: the other chips' lines of a job may come at the next read
            _hold_for_the_job_window(per_chip, jobs, now)
        for fault in [fault for faults in per_chip.values() for fault in faults] + on_host:
            del fault["times"]  # read once, above: not a value to show
        chips = tuple(dataclasses.replace(chip, extra=dict(chip.extra, **{EXTRA_KEY: per_chip.get(chip.key, [])}))
                      for chip in parts.chips)
        stats["repeat_window_seconds"] = self.config.repeat_window_seconds
        host = dataclasses.replace(parts.host, extra=dict(parts.host.extra, **{
            EXTRA_KEY: on_host, STATS_KEY: stats, JOB_FAULTS_KEY: job_faults}))
        return dataclasses.replace(parts, chips=chips, host=host)

    def close(self) -> None:
        if self.device is not None:
            self.device.close()


def _with_record_device(fault: LineFault, fields: Dict[str, str]) -> LineFault:
    """A kmsg record's DEVICE=+pci:<address> names the PCI device when the line itself does not."""
    device = fields.get("DEVICE", "")
    if fault.device is None and fault.bus is None and device.startswith("+pci:"):
        return dataclasses.replace(fault, bus=device[len("+pci:"):].lower())
    return fault


def _job_faults(per_chip: Dict[ChipKey, List[Dict[str, Any]]], chips: Sequence[ChipSample],
                jobs: Dict[ChipKey, Tuple[str, ...]]) -> List[Dict[str, Any]]:
    """The same fault on several chips of one job within seconds (jobs.py): each chip's fault gets the name of
    the first job it was found in (`job`, which keeps it out of the chip's facts), and the host one entry per
    job fault."""
    occurrences = [Occurrence(key, fault["fault_class"], fault.get("code"), tuple(fault["times"]))
                   for key, faults in per_chip.items() for fault in faults]
    subjects = {chip.key: chip.subject for chip in chips}
    found = []
    for job_fault in correlate(occurrences, jobs):
        mine = [fault for key in job_fault.chips for fault in per_chip[key]
                if (fault["fault_class"], fault.get("code")) == (job_fault.fault_class, job_fault.code)]
        for fault in mine:
            fault.setdefault("job", job_fault.job)
        latest = max(mine, key=lambda fault: fault["last_seen"])
        found.append({"job": job_fault.job, "fault_class": job_fault.fault_class, "code": job_fault.code,
                      "level": latest["level"], "summary": latest["summary"], "last_line": latest["last_line"],
                      "chips": [subjects[key] for key in job_fault.chips], "lines": sum(f["count"] for f in mine),
                      "seconds": round(job_fault.last - job_fault.first, 3)})
    return found


def _remember_jobs(per_chip: Dict[ChipKey, List[Dict[str, Any]]],
                   known: Dict[Tuple[ChipKey, str, Optional[str], float], str]
                   ) -> Dict[Tuple[ChipKey, str, Optional[str], float], str]:
    """A fault given to a job stays the job's for as long as it is held, whoever holds the chip now: each fault
    without a job of its own takes the one remembered for it. Returns what to remember: the held faults' jobs
    (bounded by the book's faults)."""
    remembered = {}
    for key, faults in per_chip.items():
        for fault in faults:
            identity = (key, fault["fault_class"], fault.get("code"), fault["first_seen"])
            if not fault.get("job") and identity in known:
                fault["job"] = known[identity]
            if fault.get("job"):
                remembered[identity] = fault["job"]
    return remembered


def _hold_for_the_job_window(per_chip: Dict[ChipKey, List[Dict[str, Any]]], jobs: Dict[ChipKey, Tuple[str, ...]],
                             now: float) -> None:
    """A fault first read less than the job window ago, on a chip that shares a job with other chips, waits
    (`job_window`, which keeps it out of the chip's facts) until the window has passed without the job's other
    chips logging it: else the first chip's sticky finding would fire before the job's fault is seen."""
    held_together = {chip for members in _multi_chip_jobs(jobs).values() for chip in members}
    for key, faults in per_chip.items():
        for fault in faults:
            if key in held_together and not fault.get("job") and now - fault["first_seen"] < JOB_WINDOW_SECONDS:
                fault["job_window"] = True


def _multi_chip_jobs(jobs: Dict[ChipKey, Tuple[str, ...]]) -> Dict[str, List[ChipKey]]:
    members: Dict[str, List[ChipKey]] = {}
    for key, names in jobs.items():
        for job in names:
            members.setdefault(job, []).append(key)
    return {job: keys for job, keys in members.items() if len(keys) > 1}


def _read_process_group(proc: str, pid: int) -> Optional[int]:
    """A process's group from <proc>/<pid>/stat; None where it cannot be read (gone, another PID namespace)."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="utf-8", errors="replace") as handle:
            return process_group(handle.read(4096))
    except OSError:
        return None


def _attribute(entry: Entry, known: Dict[int, ChipKey], by_bus: Dict[str, ChipKey],
               chips: Sequence[ChipSample]) -> Tuple[Optional[ChipKey], str]:
    """The chip a fault is on, and why: "device" (the line's device id), "unlisted" (a device id no chip of the
    table has now: a card that dropped out, or no table at all), "bus" (its PCI address), "code" (no device in
    the line, but npu-smi reports its code on one chip: that chip; on several: none of them), or "none" (an
    unattributed note: no device and no chip reporting its code, or a PCI address that is no NPU's)."""
    if entry.device is not None:
        key = known.get(entry.device)
        return key, "device" if key is not None and any(chip.key == key for chip in chips) else "unlisted"
    if entry.bus is not None:
        key = by_bus.get(entry.bus)
        return key, "bus" if key is not None else "none"
    reporting = [chip.key for chip in chips if entry.code and entry.code in chip.error_codes]
    if reporting:
        return (reporting[0] if len(reporting) == 1 else None), "code"
    return None, "none"


def _chip_by_device(chips: Sequence[ChipSample]) -> Dict[int, ChipKey]:
    """Logical id -> chip; where npu-smi gave no logical ids at all, the chips' order stands in for them."""
    with_ids = {chip.device_id: chip.key for chip in chips if chip.device_id is not None}
    if with_ids or not chips:
        return with_ids
    return {index: chip.key for index, chip in enumerate(sorted(chips, key=lambda chip: chip.key))}


def _fault_dict(entry: Entry, key: Optional[ChipKey], now: float, repeat_window: float) -> Dict[str, Any]:
    fault = dataclasses.asdict(entry)
    del fault["recent"]
    fault["repeats"] = entry.repeats(now, repeat_window)
    if key is not None:
        fault["place"] = "npu{}/chip{} (device {}, not in npu-smi's table now)".format(key[0], key[1], entry.device)
    elif entry.device is not None:
        fault["place"] = "device {}".format(entry.device)
    elif entry.bus is not None:
        fault["place"] = "PCI {}".format(entry.bus)
    else:
        fault["place"] = "host"
    return fault


def build(context: SourceContext) -> Optional[KmsgSource]:
    config = context.config.faults
    before_read = None
    kernel_log = context.target.kernel_log
    if kernel_log is not None and not config.kmsg_path:
        # The target's own kernel log (a simulated host's scenario lines), read as a file of kmsg records: on
        # wherever the target supplies one, while on a real host the source stays off until configured.
        config = dataclasses.replace(config, kmsg=False, kmsg_path=kernel_log.path)
        before_read = kernel_log.before_read
    if not config.enabled:
        return None
    state_dir = None if context.one_pass else context.state_dir
    journal = None
    if config.journal_fallback and not config.kmsg_path:
        journal = JournalReader(CommandRunner([config.journalctl], JOURNAL_TIMEOUT_SECONDS, max_concurrent=1,
                                              max_output_bytes=JOURNAL_MAX_OUTPUT_BYTES))
    return KmsgSource(config, context.target.root, state_dir, load_patterns(config.pattern_files),
                      clock=context.clock, max_age=context.config.max_age_seconds, before_read=before_read,
                      journal=journal)


METRICS = (
    MetricSpec("npumon_driver_fault_lines", ("npu", "chip", "class", "kind", "repair_action"),
               "Kernel log lines of a driver fault on the chip (npu, chip empty: the host's), while it is held."),
    MetricSpec("npumon_kmsg_records_read", (), "Kernel log records read since npumon started."),
    MetricSpec("npumon_kmsg_records_lost", (), "Kernel log records overwritten before npumon could read them."),
    MetricSpec("npumon_kmsg_lines_suppressed", (), "Driver fault lines counted but not kept (rate limit, full book)."),
)


def export(snapshot: Snapshot, out: Families) -> None:
    for chip in snapshot.chips:
        for fault in chip.extra.get(EXTRA_KEY) or ():
            out.add("npumon_driver_fault_lines", fault["count"], (chip.npu, chip.chip, fault["fault_class"],
                                                                   fault["kind"], fault["repair_action"]))
    for fault in snapshot.host.extra.get(EXTRA_KEY) or ():
        out.add("npumon_driver_fault_lines", fault["count"], ("", "", fault["fault_class"], fault["kind"],
                                                               fault["repair_action"]))
    stats = snapshot.host.extra.get(STATS_KEY) or {}
    out.add("npumon_kmsg_records_read", stats.get("records"))
    out.add("npumon_kmsg_records_lost", stats.get("lost"))
    out.add("npumon_kmsg_lines_suppressed", stats.get("suppressed"))


SPEC = SourceSpec(NAME, build, section=Section("faults", FaultsConfig,
                                               lambda section, config: faults_config_problems(section)),
                  chip_facts=chip_facts, host_facts=host_facts, metrics=METRICS, export=export)
