"""Small pure helpers shared by the npu-smi text parsers (no I/O here)."""

import re
from typing import Optional, Tuple

from ...model import MIB

NULL_TOKENS = frozenset(("", "NA", "N/A", "-", "--", "Failed", "failed"))
# npu-smi's error messages come first (after some driver log lines) or last: an output longer than two of
# these is searched for them in its head and tail only, so that a runaway answer is not scanned whole.
ERROR_SCAN_BYTES = 8 * 1024


class NpuSmiParseError(ValueError):
    """npu-smi printed something the parsers cannot read. The message says what and where."""


def head_and_tail(text: str, size: int = ERROR_SCAN_BYTES) -> str:
    """`text`, or for a longer one its first and last `size` characters cut to whole lines."""
    if len(text) <= 2 * size:
        return text
    head = text[:size]
    tail = text[-size:]
    return head[:head.rfind("\n") + 1] + tail[tail.find("\n") + 1:]


def is_null(cell: Optional[str]) -> bool:
    return cell is None or cell.strip() in NULL_TOKENS


def to_int(cell: Optional[str]) -> Optional[int]:
    """'42' -> 42; 'NA', '-', '' -> None; anything else raises NpuSmiParseError."""
    if is_null(cell):
        return None
    text = cell.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise NpuSmiParseError("expected an integer, got {!r}".format(text)) from None


def to_float(cell: Optional[str]) -> Optional[float]:
    if is_null(cell):
        return None
    text = cell.strip()
    try:
        value = float(text)
    except ValueError:
        raise NpuSmiParseError("expected a number, got {!r}".format(text)) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise NpuSmiParseError("expected a finite number, got {!r}".format(text))
    return value


def percent_to_ratio(cell: Optional[str]) -> Optional[float]:
    value = to_float(cell)
    return None if value is None else value / 100.0


def mib_to_bytes(value: Optional[int]) -> Optional[int]:
    return None if value is None else value * MIB


_USED_TOTAL = re.compile(r"^\s*(\S+?)\s*/\s*(\S+)\s*$")


def split_used_total(cell: str) -> Tuple[Optional[int], Optional[int]]:
    """'3338 / 65536', '10568/ 65536', 'NA / NA' -> (used, total)."""
    match = _USED_TOTAL.match(cell)
    if not match:
        raise NpuSmiParseError("expected 'used / total', got {!r}".format(cell.strip()))
    return to_int(match.group(1)), to_int(match.group(2))
