"""Small text widgets: a bar for a 0..1 ratio, a sparkline of recent values, cells that fit a width."""

import math
from typing import Optional, Sequence

SPARK_UNICODE = "▁▂▃▄▅▆▇█"
SPARK_ASCII = "_.-=+*#@"


def fit(text: str, width: int) -> str:
    """`text` cut to `width` characters (a cut ends in '~', so a cut value never reads as a whole one)."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return text[:width - 1] + "~" if width > 1 else text[:1]


def bar(ratio: Optional[float], width: int) -> str:
    """`[|||||     ] 55%`: `width` characters in all; `-` for an unknown ratio. Ratios outside 0..1 are clamped
    for the bar; the percentage shows the value as reported."""
    label = "   -" if not _finite(ratio) else "{:>3.0f}%".format(ratio * 100)
    inner = width - len(label) - 3  # the brackets and a space
    if inner < 1:
        return fit(label.strip(), width).rjust(width) if width > 0 else ""
    filled = 0 if not _finite(ratio) else int(round(min(1.0, max(0.0, ratio)) * inner))
    return "[" + "|" * filled + " " * (inner - filled) + "] " + label


def sparkline(values: Sequence[Optional[float]], width: int, unicode: bool = True,
              low: Optional[float] = None, high: Optional[float] = None) -> str:
    """The last `width` values as one character each, scaled between `low` and `high` (default: their range);
    a missing value is a space. Right-aligned, so the newest value is always the last character."""
    if width <= 0:
        return ""
    chars = SPARK_UNICODE if unicode else SPARK_ASCII
    recent = list(values)[-width:]
    known = [v for v in recent if _finite(v)]
    if not known:
        return " " * width
    low = min(known) if low is None else low
    high = max(known) if high is None else high
    span = high - low
    out = []
    for value in recent:
        if not _finite(value):
            out.append(" ")
            continue
        level = 0.5 if span <= 0 else (min(high, max(low, value)) - low) / span
        out.append(chars[min(len(chars) - 1, int(level * (len(chars) - 1) + 0.5))])
    return "".join(out).rjust(width)


def number(value: Optional[float], pattern: str) -> str:
    return "-" if not _finite(value) else pattern.format(value)


def gib(used: Optional[float], total: Optional[float]) -> str:
    """`54.4/64.0G`; `-` when either is unknown or the total is 0 (a chip without that memory)."""
    if not _finite(used) or not _finite(total) or not total:
        return "-"
    return "{:.1f}/{:.0f}G".format(used / 2**30, total / 2**30)


def size(size_bytes: Optional[float]) -> str:
    if not _finite(size_bytes):
        return "-"
    if size_bytes >= 2**30:
        return "{:.1f} GiB".format(size_bytes / 2**30)
    return "{:.0f} MiB".format(size_bytes / 2**20)


def age(seconds: Optional[float]) -> str:
    """`3s`, `2m`, `5h`, `-` for unknown; a clock a little ahead of the daemon's reads as 0s."""
    if not _finite(seconds):
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return "{:.0f}s".format(seconds)
    if seconds < 7200:
        return "{:.0f}m".format(seconds / 60)
    return "{:.0f}h".format(seconds / 3600)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
