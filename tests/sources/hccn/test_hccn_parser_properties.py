"""Property test: mutated and truncated real hccn_tool captures never make a parser fail in any way but its own.

As tests/sources/npusmi/test_parser_properties.py does for npu-smi: each example takes a real capture
(tests/fixtures/hccn/), damages it (truncation, dropped/duplicated/swapped lines, replaced characters,
corrupted numbers, stray separators) and feeds it to every hccn parser. A parser must return its record or
raise HccnParseError; classify_error never raises. The example count comes from the Hypothesis profile
(tests/conftest.py): 2,000 in the default "ci" run, 10,000 (the issue's bar) with HYPOTHESIS_PROFILE=thorough.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from damaged_text import damaged_captures
from hccn_captures import capture, capture_names
from npumon.sources.hccn import parse
from npumon.sources.hccn.optical import parse_optical
from npumon.sources.hccn.parse import HccnParseError

CAPTURES = [capture(name) for name in capture_names()]
PARSERS = [parse.parse_link, parse.parse_net_health, parse.parse_link_stat, parse.parse_speed,
           parse.parse_bandwidth, parse.parse_stat, parse.parse_ip, parse.parse_gateway, parse.parse_netdetect,
           parse.parse_fec, parse.parse_tls_switch, parse.parse_dev_info_ports, parse_optical]
NOISE = st.sampled_from([":", " ", "\t", "\n", "NA", "-", "0x", "99999999999999999999999", "nan", "inf", "|", "+",
                         "é", "\x00", "LINK UP", "[devid 1]", " mW", "Speed", "Unknown!", "link up count : 1"])


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # max_examples: the profile
@given(damaged_captures(CAPTURES, NOISE, digit_run=25))
def test_every_hccn_parser_returns_its_record_or_its_own_error(text):
    for parser in PARSERS:
        try:
            parser(text)
        except HccnParseError as exc:
            assert str(exc)
    error = parse.classify_error(text, text)
    assert error is None or error.message
