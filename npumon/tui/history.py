"""What the detail view's sparklines draw: each chip's recent values, kept by `npumon top` itself from the
documents it reads (a daemon's /status holds no history). Bounded in samples and in age."""

import collections
import datetime
from typing import Any, Deque, Dict, List, Optional, Tuple

from . import rows

# name -> (title, how to read it from a chip); the detail view draws one sparkline each
SERIES = (
    ("temp", "temperature C", lambda chip: chip.get("temperature_celsius")),
    ("power", "power W", lambda chip: chip.get("power_watts")),
    ("aicore", "AI Core %", lambda chip: _percent(chip.get("aicore_ratio"))),
    ("hbm", "HBM used %", lambda chip: _percent(rows.memory_ratio(chip))),
)
MAX_SAMPLES = 600  # 10 minutes at one sample a second
MAX_AGE_SECONDS = 600.0


class History:
    def __init__(self, max_samples: int = MAX_SAMPLES, max_age_seconds: float = MAX_AGE_SECONDS) -> None:
        self.max_age_seconds = max_age_seconds
        self._samples: Dict[Tuple[Any, Any], Deque[Tuple[float, Dict[str, Optional[float]]]]] = {}
        self._max_samples = max_samples
        self._last_time: Optional[str] = None

    def record(self, document: Dict[str, Any]) -> bool:
        """Add a document's chip values once per document (a daemon serves the same one until its next poll);
        False if it was recorded already or has no time."""
        stamp = document.get("time")
        moment = parse_time(stamp)
        if moment is None or stamp == self._last_time:
            return False
        self._last_time = stamp
        for chip in document.get("chips") or []:
            key = (chip.get("npu"), chip.get("chip"))
            samples = self._samples.setdefault(key, collections.deque(maxlen=self._max_samples))
            samples.append((moment, {name: read(chip) for name, _, read in SERIES}))
            while samples and moment - samples[0][0] > self.max_age_seconds:
                samples.popleft()
        return True

    def values(self, npu: Any, chip: Any, name: str) -> List[Optional[float]]:
        return [values.get(name) for _, values in self._samples.get((npu, chip), ())]

    def span_seconds(self, npu: Any, chip: Any) -> float:
        samples = self._samples.get((npu, chip))
        return 0.0 if not samples else samples[-1][0] - samples[0][0]


def parse_time(text: Any) -> Optional[float]:
    """Unix time of an RFC 3339 `time` as report.rfc3339 writes it ("2026-01-01T00:00:00Z"); None if not one."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _percent(ratio: Optional[float]) -> Optional[float]:
    return None if ratio is None else ratio * 100
