"""The faults the kernel log reported, per (device, class): counts, the last line, rate limits. Pure.

A log storm is counted, not kept: each (device, class) holds one entry, at most `rate_limit` of its lines a
minute update the entry's last line (the rest are counted as suppressed), and the book holds at most
`max_entries` entries (then a line of a new one is dropped, and counted). A fault stays in the book
`hold_seconds` after its last line; hardware and device faults stay as findings beyond that, in the rule
engine, until acknowledged (or, for device faults, a reboot). The book outlives a restart in the cursor
file (state.py), so a restart neither forgets nor repeats a fault.

Each entry also counts its lines (suppressed ones too) in REPEAT_BUCKETS buckets over the last
`repeat_window` seconds, so the escalation rules (`driver-fault-repeating`) can ask how often one fault
class came back lately, in bounded memory whatever the window; and the times of its last MAX_TIMES lines (on
the log's own clock, or when the daemon read a line without one: records.line_time), so that the same fault
on several chips of one job within seconds can be told apart (jobs.py).
"""

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional, Tuple

from ...faults.patterns import LineFault

MAX_LINE_CHARS = 300  # of a fault's last line, as facts and events show it
RATE_WINDOW_SECONDS = 60.0
REPEAT_BUCKETS = 120  # a repeat window of a day counts in 12-minute buckets
MAX_TIMES = 8  # line times kept per entry: enough to see one burst, bounded in a storm

Key = Tuple[str, str]  # (where: "device:N" / "bus:ADDR" / "host", fault class)


@dataclass
class Entry:
    fault_class: str
    kind: str
    repair_action: str
    level: Optional[str]
    summary: str
    device: Optional[int]
    bus: Optional[str]
    code: Optional[str]
    count: int
    suppressed: int
    first_seen: float
    last_seen: float
    last_line: str
    window_start: float
    window_count: int
    recent: List[List[float]] = field(default_factory=list)  # [bucket start, lines], oldest first
    times: List[float] = field(default_factory=list)  # of the last MAX_TIMES lines, oldest first

    def add_time(self, line_time: Optional[float]) -> None:
        if line_time is not None:  # a line of unknown time cannot be placed beside another
            self.times.append(line_time)
            del self.times[:-MAX_TIMES]

    def count_recent(self, line_time: float, width: float) -> None:
        start = line_time - line_time % width
        if self.recent and self.recent[-1][0] >= start:
            self.recent[-1][1] += 1
        else:
            self.recent.append([start, 1])
            del self.recent[:-REPEAT_BUCKETS - 1]

    def repeats(self, now: float, window: float) -> int:
        """Lines of this fault within the last `window` seconds (to the bucket: up to a bucket more)."""
        return int(sum(count for start, count in self.recent if start > now - window - window / REPEAT_BUCKETS))


def where(fault: LineFault) -> str:
    if fault.device is not None:
        return "device:{}".format(fault.device)
    if fault.bus is not None:
        return "bus:{}".format(fault.bus)
    return "host"


class FaultBook:
    def __init__(self, rate_limit: int = 10, max_entries: int = 256, hold_seconds: float = 3600.0,
                 repeat_window: float = 86400.0):
        self.rate_limit = rate_limit
        self.repeat_window = repeat_window
        self.max_entries = max_entries
        self.hold_seconds = hold_seconds
        self.entries: Dict[Key, Entry] = {}
        self.suppressed_total = 0  # lines counted but not kept (rate limit, full book)

    def add(self, fault: LineFault, line: str, now: float, line_time: Optional[float] = None) -> bool:
        """Count one line (logged at `line_time` on the log's own clock, None: not known); False when it was
        suppressed (rate limit or a full book)."""
        key = (where(fault), fault.fault_class)
        entry = self.entries.get(key)
        if entry is None:
            if len(self.entries) >= self.max_entries and not self._evict(now):
                self.suppressed_total += 1
                return False
            self.entries[key] = Entry(fault.fault_class, fault.kind, fault.repair_action, fault.level,
                                      fault.summary, fault.device, fault.bus, fault.code, 1, 0, now, now,
                                      line[:MAX_LINE_CHARS], now, 1)
            self.entries[key].count_recent(now, self.repeat_window / REPEAT_BUCKETS)
            self.entries[key].add_time(line_time)
            return True
        entry.count += 1
        entry.count_recent(now, self.repeat_window / REPEAT_BUCKETS)
        entry.add_time(line_time)
        entry.last_seen = now
        if now - entry.window_start >= RATE_WINDOW_SECONDS:
            entry.window_start, entry.window_count = now, 0
        if entry.window_count >= self.rate_limit:
            entry.suppressed += 1
            self.suppressed_total += 1
            return False
        entry.window_count += 1
        entry.last_line = line[:MAX_LINE_CHARS]
        entry.summary = fault.summary
        return True

    def _evict(self, now: float) -> bool:
        """Make room: drop the entry whose last line is oldest, if it is past its hold."""
        oldest = min(self.entries, key=lambda key: self.entries[key].last_seen)
        if now - self.entries[oldest].last_seen <= self.hold_seconds:
            return False
        del self.entries[oldest]
        return True

    def active(self, now: float) -> List[Entry]:
        """The entries whose last line is at most hold_seconds old, oldest first."""
        self.expire(now)
        return sorted(self.entries.values(), key=lambda entry: entry.first_seen)

    def expire(self, now: float) -> None:
        for key in [key for key, entry in self.entries.items() if now - entry.last_seen > self.hold_seconds]:
            del self.entries[key]

    def after_reboot(self) -> int:
        """A reboot fixes device and transient faults, not hardware ones: drop those. Returns how many."""
        gone = [key for key, entry in self.entries.items() if entry.kind != "hardware"]
        for key in gone:
            del self.entries[key]
        for entry in self.entries.values():
            entry.times = []  # the kernel's clock started again
        return len(gone)

    def to_json(self) -> List[Dict[str, Any]]:
        return [asdict(entry) for entry in self.entries.values()]

    def restore(self, data: Any) -> None:
        """Entries a previous run saved; malformed ones are skipped."""
        names = {f.name for f in fields(Entry)}
        for item in data if isinstance(data, list) else ():
            if isinstance(item, dict):  # saved before the repeat counts or the line times existed
                item = dict({"recent": [], "times": []}, **item)
            if not isinstance(item, dict) or set(item) != names or not _buckets(item["recent"]) \
                    or not _times(item["times"]):
                continue
            try:
                entry = Entry(**item)
                key = (where(LineFault(entry.fault_class, entry.kind, entry.repair_action, entry.level,
                                       entry.summary, entry.device, entry.bus)), entry.fault_class)
            except (TypeError, ValueError):
                continue
            if len(self.entries) < self.max_entries:
                self.entries[key] = entry


def _times(times: Any) -> bool:
    return isinstance(times, list) and len(times) <= MAX_TIMES and all(isinstance(t, (int, float)) for t in times)


def _buckets(recent: Any) -> bool:
    return isinstance(recent, list) and len(recent) <= REPEAT_BUCKETS + 1 and all(
        isinstance(bucket, list) and len(bucket) == 2 and all(isinstance(n, (int, float)) for n in bucket)
        for bucket in recent)
