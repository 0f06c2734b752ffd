"""Property test: mutated and truncated real hccn_tool captures never make a parser fail in any way but its own.

As tests/sources/npusmi/test_parser_properties.py does for npu-smi: each example takes a real capture
(tests/fixtures/hccn/), damages it (truncation, dropped/duplicated/swapped lines, replaced characters,
corrupted numbers, stray separators) and feeds it to every hccn parser. A parser must return its record or
raise HccnParseError; classify_error never raises. The example count comes from the Hypothesis profile
(tests/conftest.py): 2,000 in the default "ci" run, 10,000 (the issue's bar) with HYPOTHESIS_PROFILE=thorough.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


@st.composite
def damaged_capture(draw):
    text = draw(st.sampled_from(CAPTURES))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        kind = draw(st.sampled_from(["truncate", "drop", "duplicate", "swap", "replace", "insert", "digits"]))
        lines = text.split("\n")
        if kind == "truncate":
            text = text[:draw(st.integers(min_value=0, max_value=len(text)))]
        elif kind in ("drop", "duplicate", "swap") and lines:
            i = draw(st.integers(min_value=0, max_value=len(lines) - 1))
            j = draw(st.integers(min_value=0, max_value=len(lines) - 1))
            if kind == "drop":
                del lines[i]
            elif kind == "duplicate":
                lines.insert(i, lines[j])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif kind in ("replace", "insert") and text:
            i = draw(st.integers(min_value=0, max_value=len(text) - 1))
            noise = draw(st.one_of(NOISE, st.text(max_size=3)))
            text = text[:i] + noise + text[i + (1 if kind == "replace" else 0):]
        elif kind == "digits":
            digit = draw(st.sampled_from("0123456789"))
            text = text.replace(digit, draw(st.sampled_from(["", "x", digit * 25, "-", " "])))
    return text


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # max_examples: the profile
@given(damaged_capture())
def test_every_hccn_parser_returns_its_record_or_its_own_error(text):
    for parser in PARSERS:
        try:
            parser(text)
        except HccnParseError as exc:
            assert str(exc)
    error = parse.classify_error(text, text)
    assert error is None or error.message
