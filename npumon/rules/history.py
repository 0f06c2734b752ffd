"""Per (subject, fact) time series for the window functions, with bounded memory.

Only the facts some rule's window function reads are recorded, each kept for its longest window plus
a margin; a series also never holds more than MAX_SAMPLES samples, whatever the poll interval.
Null values are not recorded (window functions ignore them anyway).
"""

import bisect
from typing import Any, Dict, List, Mapping

from .expr import Series

MAX_SAMPLES = 20000
# Kept beyond the longest window so a window that starts between two polls still finds its first sample.
RETENTION_MARGIN_SECONDS = 60.0


class _TimeSeries:
    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times: List[float] = []
        self.values: List[Any] = []

    def append(self, when: float, value: Any, keep_after: float) -> None:
        times = self.times
        if times and when <= times[-1]:
            return  # the same snapshot twice, or a clock that went backwards: keep the series sorted
        times.append(when)
        self.values.append(value)
        drop = max(bisect.bisect_left(times, keep_after), len(times) - MAX_SAMPLES)
        if drop > 0:
            del times[:drop]
            del self.values[:drop]

    def window(self, now: float, seconds: float) -> Series:
        start = bisect.bisect_left(self.times, now - seconds)
        end = bisect.bisect_right(self.times, now, lo=start)
        return self.times[start:end], self.values[start:end]


class History:
    def __init__(self, windows: Mapping[str, float]):
        """`windows`: fact name -> the longest window (seconds) any rule uses over it."""
        self.retention: Dict[str, float] = {}
        self._series: Dict[str, Dict[str, _TimeSeries]] = {}
        self.set_windows(windows)

    def set_windows(self, windows: Mapping[str, float]) -> None:
        """New rules, new windows: keep the series still read, drop the ones no rule reads any more."""
        self.retention = {name: seconds + RETENTION_MARGIN_SECONDS for name, seconds in windows.items()}
        for per_subject in self._series.values():
            for name in [name for name in per_subject if name not in self.retention]:
                del per_subject[name]

    def record(self, subject: str, when: float, facts: Mapping[str, Any]) -> None:
        per_subject = self._series.get(subject)
        if per_subject is None:
            per_subject = self._series[subject] = {}
        for name, keep in self.retention.items():
            value = facts.get(name)
            if value is None:
                continue
            series = per_subject.get(name)
            if series is None:
                series = per_subject[name] = _TimeSeries()
            series.append(when, value, when - keep)

    def window(self, subject: str, name: str, now: float, seconds: float) -> Series:
        series = self._series.get(subject, {}).get(name)
        return ((), ()) if series is None else series.window(now, seconds)

    def forget(self, subject: str) -> None:
        self._series.pop(subject, None)

    def subjects(self) -> List[str]:
        return list(self._series)

    def sample_count(self) -> int:
        return sum(len(s.times) for per_subject in self._series.values() for s in per_subject.values())

