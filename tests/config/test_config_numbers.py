"""Numbers in the config: exponent forms YAML 1.1 leaves as strings, and nan/inf, reported at their own line."""

import pytest

from npumon.config.errors import ConfigError
from npumon.settings import config_problems, parse_config


def test_an_exponent_is_the_number_it_means():
    config = parse_config("poll:\n  health_seconds: 1e3\n  ecc_seconds: 2.5E+2\nnpu_smi_timeout_seconds: 5e0\n")
    assert (config.poll.health_seconds, config.poll.ecc_seconds, config.npu_smi_timeout_seconds) == (1000.0, 250.0, 5.0)


def test_a_huge_poll_interval_gets_the_real_reason_not_not_a_number():
    with pytest.raises(ConfigError) as info:
        parse_config("poll:\n  table_seconds: 1e9\n", "FILE")
    assert "expected a number" not in str(info.value)
    assert "must be longer than poll.table_seconds (1e+09s)" in str(info.value)


@pytest.mark.parametrize("text, line, key", [
    ("log_level: info\npoll:\n  table_seconds: .nan\n", 3, "poll.table_seconds"),
    ("log_level: info\n\nnpu_smi_timeout_seconds: .inf\n", 3, "npu_smi_timeout_seconds"),
    ("poll:\n  health_seconds: -.inf\n", 2, "poll.health_seconds"),
    ("exporter:\n  listen: ':9842'\n  request_timeout_seconds: .NaN\n", 3, "exporter.request_timeout_seconds"),
])
def test_nan_and_inf_are_refused_at_their_own_line(text, line, key):
    with pytest.raises(ConfigError) as info:
        parse_config(text, "FILE")
    assert str(info.value).startswith("FILE:{}: {}: expected a finite number, got ".format(line, key))


def test_a_whole_number_in_exponent_form_is_still_refused_with_the_type(tmp_path):
    path = tmp_path / "npumon.yaml"
    path.write_text("npu_smi_max_concurrent: 1e3\n")
    _, problems = config_problems(str(path))
    assert problems == ["{}:1: npu_smi_max_concurrent: expected a whole number, got '1e3'".format(path)]
