"""Property test: mutated and truncated real captures never make a parser fail in any way but its own.

Each example takes a real capture, damages it (truncation, dropped/duplicated/swapped lines, replaced
characters, corrupted numbers, stray separators) and feeds it to every npu-smi parser. A parser must return
records or raise NpuSmiParseError: a TypeError, IndexError or KeyError here is a crash waiting for a
real host. The example count comes from the Hypothesis profile (tests/conftest.py): 2,000 in the default
"ci" run, 10,000 (the issue's bar) with HYPOTHESIS_PROFILE=thorough."""

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from damaged_text import damaged_captures
from npumon.sources.npusmi import kv as npusmi_kv
from npumon.sources.npusmi import links as npusmi_links
from npumon.sources.npusmi.common import NpuSmiParseError
from npumon.sources.npusmi.table import parse_info
from paths import FIXTURES

FIXTURES = Path(FIXTURES)
CAPTURES = sorted(
    path.read_text().split("# ---\n", 1)[1]
    for path in FIXTURES.glob("*.txt")
    if not path.name.startswith(("version-files_", "dev-"))
)
PARSERS = [
    parse_info,
    npusmi_kv.parse_usages, npusmi_kv.parse_common, npusmi_kv.parse_power, npusmi_kv.parse_temp,
    npusmi_kv.parse_ecc, npusmi_kv.parse_health, npusmi_kv.parse_board, npusmi_kv.parse_memory,
    npusmi_kv.parse_list, npusmi_kv.parse_mapping,
    npusmi_links.parse_hccs, npusmi_links.parse_hccs_bandwidth, npusmi_links.parse_sio,
]
NOISE = st.sampled_from(["|", "+", "/", ":", " ", "\t", "\n", "NA", "-", "0x", "999999999999", "nan", "inf",
                         "é", "\x00", "=", "Chip ID", "NPU ID", "Health"])


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # max_examples: the profile
@given(damaged_captures(CAPTURES, NOISE, digit_run=12))
def test_every_parser_returns_records_or_its_own_error(text):
    for parse in PARSERS:
        try:
            parse(text)
        except NpuSmiParseError as exc:
            assert str(exc)  # a message that says what was wrong, not an empty error
    error = npusmi_kv.classify_error(text)  # never raises: it answers "known error" or None
    assert error is None or error.message
