"""The main table's fast path (table_fast.py) answers exactly what the careful line-by-line reader answers.

Every example is a real capture, intact or damaged (tests/damaged_text.py), read both ways: through
parse_info (fast path first) and with the fast path turned off. Records, problems and errors must be equal,
with and without skip_bad_rows.
"""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from damaged_text import damaged_captures
from npumon.sources.npusmi import table
from npumon.sources.npusmi.common import NpuSmiParseError
from paths import FIXTURES

CAPTURES = sorted(
    path.read_text().split("# ---\n", 1)[1]
    for path in Path(FIXTURES).glob("*.txt")
    if not path.name.startswith(("version-files_", "dev-"))
)
TABLES = [text for text in CAPTURES if "Health" in text and "NPU" in text]
NOISE = st.sampled_from(["|", "+", "/", " ", "\t", "\n", "NA", "-", "0x", "999999999999", "nan", "inf", "é",
                         "\xa0", "\x1f", "Process id", "No running processes found in NPU", "1e5", "1_0"])


def outcome(text, skip_bad_rows):
    try:
        return table.parse_info(text, skip_bad_rows=skip_bad_rows)
    except NpuSmiParseError as exc:
        return "error: {}".format(exc)


def careful(text, skip_bad_rows, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(table, "_read_fast", lambda lines, start: (None, None, None))
        patch.setattr(table, "_read_clean", lambda text: None)
        return outcome(text, skip_bad_rows)


def test_the_fast_path_reads_the_well_formed_captures():
    fast_reads = 0
    for text in TABLES:
        lines = list(filter(None, map(str.strip, text.splitlines())))
        header_at = table._find_chip_header(lines)
        if header_at is not None and table._read_fast(lines, header_at + 2)[0] is not None:
            fast_reads += 1
    assert fast_reads >= len(TABLES) // 2  # else the fast path is dead code and this file proves nothing


@pytest.mark.parametrize("index", range(len(TABLES)))
def test_every_capture_reads_the_same_both_ways(index, monkeypatch):
    text = TABLES[index]
    for skip_bad_rows in (False, True):
        assert outcome(text, skip_bad_rows) == careful(text, skip_bad_rows, monkeypatch)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(damaged_captures(TABLES, NOISE, digit_run=12))
def test_damaged_captures_read_the_same_both_ways(monkeypatch, text):
    for skip_bad_rows in (False, True):
        assert outcome(text, skip_bad_rows) == careful(text, skip_bad_rows, monkeypatch)
