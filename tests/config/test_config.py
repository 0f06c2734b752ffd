"""Config loading: types, defaults, and one-line errors naming file, line and key."""

import pytest

from npumon.config.errors import ConfigError
from npumon.config.schema import DEFAULT_STATE_DIR, STATE_DIR_ENV
from npumon.settings import Config, load_config, parse_config
from npumon.outputs.web import parse_listen


def _error(text, tmp_path):
    path = tmp_path / "npumon.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    message = str(info.value)
    assert "\n" not in message
    return message.replace(str(path), "FILE")


def test_defaults_and_empty_file(tmp_path):
    assert load_config(None) == Config()
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(str(path)).npu_smi == "npu-smi"


def test_state_dir_defaults_to_npumon_state_dir_when_set_and_a_file_still_wins(monkeypatch, tmp_path):
    monkeypatch.delenv(STATE_DIR_ENV)
    assert Config().state_dir == DEFAULT_STATE_DIR == "/var/lib/npumon"
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    assert Config().state_dir == str(tmp_path / "state")
    assert parse_config("log_level: debug\n", "FILE").state_dir == str(tmp_path / "state")
    assert parse_config("state_dir: /srv/npumon\n", "FILE").state_dir == "/srv/npumon"


def test_values_are_converted():
    config = parse_config(
        "npu_smi: /usr/local/bin/npu-smi\n"
        "npu_smi_timeout_seconds: 5\n"
        "poll:\n  table_seconds: 10\n  ecc_seconds: 0\n"
        "thresholds:\n  temperature_critical_celsius: 90\n"
        "exporter:\n  listen: '[::1]:9000'\n  npu_exporter_compat: true\n"
        "rule_files: [/etc/npumon/rules.d/site.yaml]\n", "x.yaml")
    assert config.npu_smi_timeout_seconds == 5.0 and isinstance(config.npu_smi_timeout_seconds, float)
    assert config.poll.table_seconds == 10.0 and config.poll.ecc_seconds == 0.0
    assert config.poll.usages_seconds == 30.0  # default kept
    assert config.thresholds == {"temperature_critical_celsius": 90.0}
    assert config.exporter.npu_exporter_compat is True
    assert config.rule_files == ["/etc/npumon/rules.d/site.yaml"]
    assert parse_listen(config.exporter.listen) == ("::1", 9000)


@pytest.mark.parametrize("text, expected", [
    ("npu_smi_timeout_seconds: ten\n", "FILE:1: npu_smi_timeout_seconds: expected a number, got 'ten'"),
    ("poll:\n  table_seconds: 15\n  tabel_seconds: 3\n", "FILE:3: poll.tabel_seconds: unknown key"),
    ("poll: 15\n", "FILE:1: poll: expected a mapping"),
    ("log_level: loud\n", "FILE:1: log_level: must be one of debug, info, warning, error"),
    ("exporter:\n  npu_exporter_compat: yes please\n", "FILE:2: exporter.npu_exporter_compat: expected a boolean"),
    ("poll:\n  table_seconds: 0\n", "FILE:2: poll.table_seconds: must be greater than 0"),
    ("a: [1, 2\n", "FILE:2: bad YAML"),
    ("npu_smi: x\nnpu_smi: y\n", "FILE:2: npu_smi: key given twice"),
    ("thresholds:\n  temprature_critical_celsius: 90\n", "FILE:2: thresholds.temprature_critical_celsius: unknown threshold"),
    ("exporter:\n  listen: localhost\n", "FILE:2: exporter.listen: listen address 'localhost' has no port"),
    ("rule_files: /etc/rules.yaml\n", "FILE:1: rule_files: expected a list"),
    ("log_level: info\ncheck_max_concurrent: 0\n", "FILE:2: check_max_concurrent: must be at least 1"),
    ("kubernetes:\n  max_message_bytes: 0\n", "FILE:2: kubernetes.max_message_bytes: must be greater than 0 and "
     "at most 67108864 (64 MiB)"),
])
def test_errors_name_file_line_and_key(tmp_path, text, expected):
    assert _error(text, tmp_path).startswith(expected)


def test_unreadable_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path / "missing.yaml"))
    assert "cannot read config" in str(info.value)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError):
        load_config(str(binary))
