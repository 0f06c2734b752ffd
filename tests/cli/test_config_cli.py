"""The default config file (what the systemd unit reads), `npumon config check` and `npumon config show`."""

import json
import os
import re

import pytest

from npumon.config.location import CONFIG_ENV, DEFAULT_CONFIG_PATH
from npumon.config.schema import STATE_DIR_ENV
from paths import REPO
from recording_server import RecordingServer

TOKEN = "cfg-t0ken-0123456789"


@pytest.fixture
def default_file(tmp_path, monkeypatch):
    """The default config file, at a temporary path: written by the test, or left absent."""
    path = tmp_path / "etc" / "npumon.yaml"
    monkeypatch.setenv(CONFIG_ENV, str(path))
    return path


def test_the_default_file_is_the_one_the_systemd_unit_reads():
    with open(os.path.join(REPO, "systemd", "npumon.service"), encoding="utf-8") as handle:
        exec_start = [line for line in handle if line.startswith("ExecStart=")]
    assert exec_start and exec_start[0].rstrip().endswith("--config " + DEFAULT_CONFIG_PATH)


def test_every_command_reads_the_default_file_when_present(default_file, run):
    with RecordingServer() as hook:
        default_file.parent.mkdir()
        default_file.write_text("notify:\n  receivers:\n    - {{name: hook, type: webhook, url: '{}'}}\n".format(
            hook.url("/hook?token=" + TOKEN)))
        code, out, err = run("notify", "test")
        assert len(hook.requests) == 1
    assert code == 0 and out.startswith("hook (webhook, ") and err == ""
    code, out, err = run("check", "--simulate", "--json")  # the default file holds no thresholds: still read
    assert json.loads(out)["status"] == "ok"
    default_file.write_text("log_level: loud\n")
    code, out, _ = run("check", "--simulate")
    assert code == 3 and "{}:1: log_level".format(default_file) in out
    assert run("events")[2] == "npumon: {}:1: log_level: must be one of debug, info, warning, error\n".format(
        default_file)


def test_without_a_file_messages_name_the_file_looked_for_not_defaults(default_file, run):
    code, out, err = run("notify", "test")
    assert code == 2 and err == "npumon: no receivers configured (notify.receivers; no config file: {} not " \
                                "present)\n".format(default_file)
    code, out, err = run("control", "fan", "--duty", "60", "--simulate")
    assert code == 1 and "control.enabled: true in {} (not present yet)".format(default_file) in err
    assert "<defaults>" not in out + err


def test_an_explicit_config_wins_over_the_default_file(default_file, tmp_path, run):
    default_file.parent.mkdir()
    default_file.write_text("log_level: loud\n")
    other = tmp_path / "other.yaml"
    other.write_text("log_level: debug\n")
    code, out, _ = run("config", "show", "--config", str(other), "--json")
    assert code == 0 and json.loads(out)["config"]["log_level"] == "debug"


def test_config_check_reports_every_problem_one_line_each_in_file_order(tmp_path, run):
    path = tmp_path / "npumon.yaml"
    path.write_text("log_level: loud\npoll:\n  table_seconds: .nan\n  tabel_seconds: 3\n"
                    "exporter:\n  listen: ':19803x'\n")
    code, out, err = run("config", "check", str(path))
    lines = [line.replace(str(path), "FILE") for line in out.splitlines()]
    assert code == 2 and err == "" and len(lines) == 4
    assert lines[0] == "FILE:1: log_level: must be one of debug, info, warning, error"
    assert lines[1] == "FILE:3: poll.table_seconds: expected a finite number, got nan"
    assert lines[2].startswith("FILE:4: poll.tabel_seconds: unknown key")
    assert lines[3].startswith("FILE:6: exporter.listen: ")


def test_config_check_ok_and_the_default_file_and_rule_files(default_file, tmp_path, run):
    code, out, err = run("config", "check")
    assert code == 2 and err == "npumon: no config file: {} not present: nothing to check (the built-in " \
                                "defaults are valid)\n".format(default_file)
    default_file.parent.mkdir()
    default_file.write_text("poll:\n  table_seconds: 1e1\n")  # YAML 1.1 reads 1e1 as a string: still a number
    assert run("config", "check") == (0, "{}: ok\n".format(default_file), "")
    rules = tmp_path / "site.yaml"
    rules.write_text("rules:\n  - nonsense\n")
    default_file.write_text("rule_files: [{}]\n".format(rules))
    code, out, _ = run("config", "check")
    assert code == 2 and len(out.splitlines()) == 1 and str(rules) in out


def test_config_show_fills_in_defaults_and_masks_secrets(tmp_path, run, monkeypatch):
    monkeypatch.delenv(STATE_DIR_ENV)  # the built-in default, not the test's own state dir (nothing is written)
    path = tmp_path / "npumon.yaml"
    path.write_text("poll:\n  table_seconds: 5\nnotify:\n  receivers:\n"
                    "    - {{name: robot, type: dingtalk, url: 'https://oapi.example/robot?access_token={0}', "
                    "secret: SEC{0}}}\n".format(TOKEN))
    code, out, err = run("config", "show", "-c", str(path))
    assert code == 0 and err == "" and TOKEN not in out
    assert out.startswith("# effective config: {}\n".format(path))
    assert re.search(r"^  table_seconds: 5\.0$", out, re.M) and re.search(r"^  ecc_seconds: 300\.0$", out, re.M)
    code, out, _ = run("config", "show", "-c", str(path), "--json")
    document = json.loads(out)
    (receiver,) = document["config"]["notify"]["receivers"]
    assert receiver["url"] == "<secret>" and receiver["secret"] == "<secret>" and receiver["secret_file"] is None
    assert document["config"]["state_dir"] == "/var/lib/npumon" and TOKEN not in out
