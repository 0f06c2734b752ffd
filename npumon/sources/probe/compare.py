"""The probe's data checks: a known copy pattern, and results compared byte for byte or within a tolerance.
Pure functions; run in the probe child (Python 3.7+)."""

import math
import struct

from .protocol import DTYPE_FORMATS

_BLOCK = 256


def copy_pattern(size):
    """`size` bytes in which every 256-byte block is a different rotation of 0..255: every byte value
    appears, neighbouring bytes differ, and a block landing at the wrong address does not match."""
    rotations = [bytes(range(start, _BLOCK)) + bytes(range(start)) for start in range(_BLOCK)]
    blocks = (size + _BLOCK - 1) // _BLOCK
    return b"".join(rotations[(index * 37) % _BLOCK] for index in range(blocks))[:size]


def byte_mismatch(expected, got):
    """None when `got` equals `expected`; else one line saying where and how they differ."""
    if got == expected:
        return None
    if len(got) != len(expected):
        return "copy-back returned {} bytes, {} were sent".format(len(got), len(expected))
    differing = [index for index, (want, have) in enumerate(zip(expected, got)) if want != have]
    first = differing[0]
    return "copy-back differs from the pattern sent in {} of {} bytes; first at offset {} (sent 0x{:02x}, got 0x{:02x})".format(
        len(differing), len(expected), first, expected[first], got[first])


def value_mismatch(expected, got, dtype, tolerance):
    """None when every value of `got` is within `tolerance` of `expected` (raw little-endian buffers of
    `dtype`); else one line naming the worst value."""
    fmt = DTYPE_FORMATS[dtype]
    size = struct.calcsize(fmt)
    if len(got) != len(expected):
        return "output has {} bytes, the expected output {}".format(len(got), len(expected))
    count = len(expected) // size
    wanted = struct.unpack("<{}{}".format(count, fmt), expected[:count * size])
    values = struct.unpack("<{}{}".format(count, fmt), got[:count * size])
    bad = [index for index in range(count) if not _close(wanted[index], values[index], tolerance)]
    if not bad:
        return None
    worst = max(bad, key=lambda index: _distance(wanted[index], values[index]))
    return ("output differs from the expected output in {} of {} values; worst at index {}: expected {!r}, "
            "got {!r} (tolerance {!r})".format(len(bad), count, worst, wanted[worst], values[worst], tolerance))


def _close(wanted, value, tolerance):
    if value == wanted:
        return True
    if isinstance(wanted, float) and math.isnan(wanted):
        return math.isnan(value)
    return abs(value - wanted) <= tolerance  # False for a NaN or an infinity where a number was expected


def _distance(wanted, value):
    distance = abs(value - wanted)
    return math.inf if math.isnan(distance) else distance
