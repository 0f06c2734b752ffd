"""What the daemon tells its operator: one log line when a source goes down or recovers and when a finding
fires or resolves, rate-limited per subject so a flapping source cannot flood journald.

Real problems (a source down, a warning or critical finding) are logged at WARNING and their ends at INFO,
so `journalctl -u npumon -p warning` shows every real problem and nothing else.

`changes()` is pure: two consecutive published Snapshots and the rule engine's transitions in, Lines out.
`RateLimit` keeps at most a few lines per subject a minute and sums up the rest in one line; it runs on the
Snapshots' clock, so tests drive it with a fake one. `Journal` puts the two together for the daemon.
"""

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import AbstractSet, Dict, List, Optional, Sequence, Tuple

from ..model import Finding, Snapshot, SourceStatus
from ..rules.engine import FIRED

log = logging.getLogger(__name__)

LINES_PER_WINDOW = 4  # per subject: two down/up rounds are shown in full, the rest summed up
WINDOW_SECONDS = 60.0
MAX_SUBJECTS = 1000  # rate-limit windows kept at once; the oldest goes first
_PROBLEM_SEVERITIES = ("warning", "critical")


@dataclass(frozen=True)
class Line:
    subject: str  # what the line is about, and the unit of rate limiting: "source npu-smi", "finding r on host"
    level: int  # a logging level
    message: str


# -- what changed: pure ------------------------------------------------------------------------------------

def is_down(status: SourceStatus) -> bool:
    """Failing for real (SourceStatus.failing; the source-down rule counts the same): a source that waits for its
    first poll or for another source says nothing (that one's line says why: npu-smi's queries wait for its table)."""
    return status.failing


def changes(previous: Optional[Snapshot], snapshot: Snapshot, transitions: Sequence[Tuple[str, Finding]],
            acknowledged: AbstractSet[Tuple[str, str]] = frozenset()) -> List[Line]:
    """The lines for one publish: sources that went down or recovered since `previous` (None: the first
    publish, so a source that is down from the start says so once), then the findings that fired or resolved
    (or went quiet because they were acknowledged: their (rule, subject) in `acknowledged`)."""
    return source_lines(previous, snapshot) + finding_lines(transitions, acknowledged)


def source_lines(previous: Optional[Snapshot], snapshot: Snapshot) -> List[Line]:
    before: Dict[str, SourceStatus] = previous.sources if previous is not None else {}
    lines = []
    for name, status in sorted(snapshot.sources.items()):
        old = before.get(name)
        was_down = old is not None and is_down(old)
        subject = "source " + name
        if is_down(status) and not was_down:
            lines.append(Line(subject, logging.WARNING, "source {} is down: {}".format(
                name, status.error or "no reason given")))
        elif was_down and not is_down(status) and not status.not_polled_yet:
            lines.append(Line(subject, logging.INFO, "source {} {} ({})".format(
                name, "is unsupported on this host" if status.unsupported else "is up again",
                _outage(old, status))))
    return lines


def _outage(old: SourceStatus, new: SourceStatus) -> str:
    """How long a recovered source went without an answer, and why, as far as its statuses tell."""
    reason = old.error or "no reason given"
    if old.last_success is None:
        return "it had not answered since the start; last error: {}".format(reason)
    if new.last_success is not None and new.last_success >= old.last_success:
        return "no answer for {:.0f}s; last error: {}".format(new.last_success - old.last_success, reason)
    return "last error: {}".format(reason)


def finding_lines(transitions: Sequence[Tuple[str, Finding]],
                  acknowledged: AbstractSet[Tuple[str, str]] = frozenset()) -> List[Line]:
    """A warning or critical finding firing is a problem (WARNING); an info or shadow one, and every
    resolution, is news (INFO). A resolved finding's summary is what it said while it held: "was"."""
    lines = []
    for kind, finding in transitions:
        subject = "finding {} on {}".format(finding.rule, finding.subject)
        if kind == FIRED:
            problem = finding.severity in _PROBLEM_SEVERITIES and not finding.shadow
            message = "finding fired: {} on {} ({}{}): {}".format(
                finding.rule, finding.subject, finding.severity, ", shadow" if finding.shadow else "", finding.summary)
            lines.append(Line(subject, logging.WARNING if problem else logging.INFO, message))
        elif (finding.rule, finding.subject) in acknowledged:  # it still holds: quiet, not resolved
            lines.append(Line(subject, logging.INFO, "finding acknowledged: {} on {}, quiet until it clears "
                                                     "(it still holds: {})".format(finding.rule, finding.subject,
                                                                                   finding.summary)))
        else:
            lines.append(Line(subject, logging.INFO, "finding resolved: {} on {} (was: {})".format(
                finding.rule, finding.subject, finding.summary)))
    return lines


# -- how much of it to log ---------------------------------------------------------------------------------

class _Window:
    __slots__ = ("start", "count", "suppressed", "level", "last")

    def __init__(self, start: float):
        self.start = start
        self.count = 0  # lines logged in this window
        self.suppressed = 0
        self.level = logging.DEBUG  # the highest level suppressed
        self.last: Optional[str] = None  # the last line suppressed: the subject's state now


class RateLimit:
    """At most `per_window` lines per subject in `window` seconds. Lines over that are counted and, once the
    window ends, summed up in one line at the highest level among them, ending with the last of them (so the
    log still says where the subject stands). Memory is bounded: a subject's window is forgotten when it
    ends, and at most `max_subjects` are kept (the oldest is summed up and dropped first)."""

    def __init__(self, per_window: int = LINES_PER_WINDOW, window: float = WINDOW_SECONDS,
                 max_subjects: int = MAX_SUBJECTS):
        self.per_window = per_window
        self.window = window
        self.max_subjects = max_subjects
        self._windows: "OrderedDict[str, _Window]" = OrderedDict()  # oldest start first

    def __len__(self) -> int:
        return len(self._windows)

    def admit(self, line: Line, now: float) -> List[Line]:
        """What to log for `line` at `now`: the line, nothing (suppressed), or a summary and then the line."""
        out = []
        window = self._windows.get(line.subject)
        if window is not None and self._ended(window, now):
            out.extend(self._end(line.subject))
            window = None
        if window is None:
            while len(self._windows) >= self.max_subjects:
                out.extend(self._end(next(iter(self._windows))))
            window = self._windows[line.subject] = _Window(now)
        if window.count < self.per_window:
            window.count += 1
            out.append(line)
        else:
            window.suppressed += 1
            window.level = max(window.level, line.level)
            window.last = line.message
        return out

    def expired(self, now: float) -> List[Line]:
        """Summaries of the windows that have ended by `now`; those windows are forgotten."""
        out = []
        for subject in [subject for subject, window in self._windows.items() if self._ended(window, now)]:
            out.extend(self._end(subject))
        return out

    def _ended(self, window: _Window, now: float) -> bool:
        return now - window.start >= self.window or now < window.start  # also when the wall clock went back

    def _end(self, subject: str) -> List[Line]:
        window = self._windows.pop(subject)
        if not window.suppressed:
            return []
        message = "{}: {} more line{} suppressed within {:.0f}s (flapping); the last: {}".format(
            subject, window.suppressed, "" if window.suppressed == 1 else "s", self.window, window.last)
        return [Line(subject, window.level, message)]


class Journal:
    """The daemon's operator log: call `publish` once per published Snapshot, from one thread at a time
    (the primary job)."""

    def __init__(self, logger: logging.Logger = log, limit: Optional[RateLimit] = None):
        self._log = logger
        self.limit = limit or RateLimit()

    def publish(self, previous: Optional[Snapshot], snapshot: Snapshot, transitions: Sequence[Tuple[str, Finding]],
                acknowledged: AbstractSet[Tuple[str, str]] = frozenset()) -> List[Line]:
        """Log what changed from `previous` to `snapshot`, rate-limited on the snapshot's clock; returns the
        lines logged."""
        now = snapshot.time
        lines = self.limit.expired(now)
        for line in changes(previous, snapshot, transitions, acknowledged):
            lines.extend(self.limit.admit(line, now))
        for line in lines:
            self._log.log(line.level, "%s", line.message)
        return lines
