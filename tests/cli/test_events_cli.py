"""`npumon events` and `npumon ack` against a real history file: output forms, filters, and a one-line
error with exit code 2 for every mistake."""

import json
import os
import time

import pytest

from npumon.cli.main import main
from npumon.services.events.store import ACTIVE, EventStore, events_path
from npumon.cli.events import parse_when
from npumon.model import Finding

NOW = time.time()


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "npumon.yaml"
    path.write_text("state_dir: {}\n".format(tmp_path / "state"), encoding="utf-8")
    return str(path)


@pytest.fixture
def store(tmp_path, config):
    store = EventStore(events_path(str(tmp_path / "state")))
    yield store
    store.close()


def fire(store, rule, subject, when=None):
    finding = Finding(rule=rule, severity="critical", subject=subject, summary="{} summary".format(rule), hint="h",
                      since=NOW)
    event_id = store.record("finding_fired", subject, "{}: {}".format(rule, finding.summary), "critical",
                            finding.to_json(), time=when)
    store.put_finding(finding, ACTIVE, event_id)
    return event_id


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------------------------- events

def test_events_table_and_json(capsys, config, store):
    store.record("chip_appeared", "npu0/chip0", "npu0/chip0 appeared", "info", {"bus_id": "0000:C1:00.0"},
                 time=NOW - 7200)
    fire(store, "health-alarm", "npu0/chip0", when=NOW - 60)
    code, out, err = run(capsys, "events", "-c", config)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["TIME", "KIND", "SUBJECT", "SEVERITY", "MESSAGE"]
    assert lines[1].split()[1:] == ["chip_appeared", "npu0/chip0", "info", "npu0/chip0", "appeared"]
    assert lines[2].split()[1:4] == ["finding_fired", "npu0/chip0", "critical"]
    assert lines[2].endswith("health-alarm: health-alarm summary")

    code, out, _ = run(capsys, "events", "-c", config, "--since", "1h", "--json")
    [event] = json.loads(out)
    assert code == 0
    assert set(event) == {"id", "time", "timestamp", "kind", "subject", "severity", "message", "details"}
    assert event["kind"] == "finding_fired" and event["details"]["rule"] == "health-alarm"
    assert event["time"].endswith("Z")


def test_events_filters(capsys, config, store):
    now = time.time()
    for npu in (1, 10):
        store.record("chip_appeared", "npu{}/chip0".format(npu), "appeared {}".format(npu), time=now - 600 * npu)
    store.record("probe_failed", "npu1/chip0", "probe", time=now)

    def kinds_and_subjects(*args):
        code, out, _ = run(capsys, "events", "-c", config, "--json", *args)
        assert code == 0
        return [(event["kind"], event["subject"]) for event in json.loads(out)]

    assert kinds_and_subjects("--npu", "1") == [("chip_appeared", "npu1/chip0"), ("probe_failed", "npu1/chip0")]
    assert kinds_and_subjects("--kind", "probe_failed") == [("probe_failed", "npu1/chip0")]
    assert kinds_and_subjects("--limit", "1") == [("probe_failed", "npu1/chip0")]
    assert kinds_and_subjects("--until", "5m") == [("chip_appeared", "npu10/chip0"), ("chip_appeared", "npu1/chip0")]
    assert kinds_and_subjects("--since", "2030-01-01T00:00:00Z") == []


def test_no_events(capsys, config, store):
    assert run(capsys, "events", "-c", config) == (0, "no events\n", "")
    assert run(capsys, "events", "-c", config, "--json") == (0, "[]\n", "")


@pytest.mark.parametrize("args, message", [
    (["--since", "yesterday"], "npumon: --since: expected a duration like 30m, 1h, 2d or a time like "
                               "2024-05-01T08:00:00Z, got 'yesterday'"),
    (["--npu", "-1"], "npumon: --npu: expected a whole number 0 or more, got '-1'"),
    (["--limit", "ten"], "npumon: --limit: expected a whole number 0 or more, got 'ten'"),
    (["--kind", "fired"], "npumon: --kind: unknown kind 'fired' (known: finding_fired, finding_resolved, "
                          "finding_acknowledged, health_changed, error_code_new, chip_appeared, chip_disappeared, "
                          "control_action, control_refused, probe_failed, notification_failed, host_rebooted, "
                          "diag_completed, handoff_action, handoff_problem, verdict_changed)"),
])
def test_events_bad_arguments_are_one_line(capsys, config, store, args, message):
    assert run(capsys, "events", "-c", config, *args) == (2, "", message + "\n")


def test_events_without_a_history_or_with_a_broken_one(capsys, tmp_path, config):
    path = events_path(str(tmp_path / "state"))
    code, out, err = run(capsys, "events", "-c", config)
    assert (code, out) == (2, "")
    assert err == "npumon: {}: no event history here (`npumon run` creates it; is state_dir in the config " \
                  "right?)\n".format(path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "events.sqlite").write_bytes(b"\0garbage" * 512)
    code, out, err = run(capsys, "events", "-c", config)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith("npumon: {}: cannot open the event history: ".format(path))


def test_events_bad_config_and_history_turned_off(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("events:\n  retention_days: 0\n", encoding="utf-8")
    assert run(capsys, "events", "-c", str(bad)) == (
        2, "", "npumon: {}:2: events.retention_days: must be greater than 0\n".format(bad))
    off = tmp_path / "off.yaml"
    off.write_text("events: {enabled: false}\n", encoding="utf-8")
    assert run(capsys, "events", "-c", str(off)) == (
        2, "", "npumon: the event history is turned off in {} (events.enabled: false)\n".format(off))
    for text, key in (("events: {enabeld: true}\n", "events.enabeld: unknown key"),
                      ("events: {retention_days: soon}\n", "events.retention_days: expected a number")):
        bad.write_text(text, encoding="utf-8")
        code, _, err = run(capsys, "events", "-c", str(bad))
        assert code == 2 and err.startswith("npumon: {}:1: {}".format(bad, key))


def test_parse_when():
    assert parse_when("90s", 1000.0, "--since") == 910.0
    assert parse_when("1.5h", 10000.0, "--since") == 10000.0 - 5400
    assert parse_when("2d", 200000.0, "--since") == 200000.0 - 172800
    assert parse_when("1w", 10 ** 6, "--since") == 10 ** 6 - 604800
    assert parse_when("1970-01-02T00:00:00Z", 0, "--since") == 86400.0
    assert parse_when("1970-01-02T08:00:00+08:00", 0, "--since") == 86400.0
    assert parse_when(None, 0, "--since") is None


# --------------------------------------------------------------------------------------------- ack

def test_ack_records_who_and_why(capsys, config, store, monkeypatch):
    monkeypatch.setenv("SUDO_USER", "alice")
    fired_id = fire(store, "ecc-uncorrectable", "npu2/chip0")
    code, out, err = run(capsys, "ack", "-c", config, "ecc-uncorrectable", "npu2/chip0", "--note", "INC-7")
    assert (code, err) == (0, "")
    assert out == "acknowledged ecc-uncorrectable on npu2/chip0: ecc-uncorrectable summary\n"
    [ack] = store.query(kinds=["finding_acknowledged"])
    assert ack.subject == "npu2/chip0" and ack.message == "ecc-uncorrectable acknowledged by alice: INC-7"
    assert ack.details == {"rule": "ecc-uncorrectable", "note": "INC-7", "user": "alice", "fired_event_id": fired_id}
    # until the daemon applies it, a second ack says so and records nothing
    assert run(capsys, "ack", "-c", config, "ecc-uncorrectable", "npu2/chip0")[1].startswith("already acknowledged")
    assert len(store.query(kinds=["finding_acknowledged"])) == 1


def test_ack_all(capsys, config, store):
    assert run(capsys, "ack", "-c", config, "--all") == (0, "no active findings to acknowledge\n", "")
    fire(store, "health-critical", "npu0/chip0")
    fire(store, "ecc-uncorrectable", "npu2/chip0")
    code, out, _ = run(capsys, "ack", "-c", config, "--all")
    assert code == 0 and out.splitlines() == [
        "acknowledged ecc-uncorrectable on npu2/chip0: ecc-uncorrectable summary",
        "acknowledged health-critical on npu0/chip0: health-critical summary"]


@pytest.mark.parametrize("args, message", [
    (["ecc-uncorrectable"], "npumon: ack: give RULE SUBJECT (e.g. `npumon ack ecc-uncorrectable npu2/chip0`) or --all"),
    (["--all", "x", "host"], "npumon: ack: give either RULE SUBJECT or --all, not both"),
    (["ecc-uncorrectable", "npu2"], "npumon: ack: SUBJECT must be 'host' or npu<N>/chip<C> (e.g. npu2/chip0), "
                                    "got 'npu2'"),
    (["ecc-uncorrectable", "npu1/chip0"], "npumon: no active finding ecc-uncorrectable on npu1/chip0 "
                                          "(active: ecc-uncorrectable npu2/chip0)"),
    (["x", "host", "--note", "n" * 1001], "npumon: --note: at most 1000 characters"),
])
def test_ack_mistakes_are_one_line(capsys, config, store, args, message):
    fire(store, "ecc-uncorrectable", "npu2/chip0")
    assert run(capsys, "ack", "-c", config, *args) == (2, "", message + "\n")
    assert store.query(kinds=["finding_acknowledged"]) == []


def test_ack_never_creates_a_history(capsys, tmp_path, config):
    code, _, err = run(capsys, "ack", "-c", config, "x", "host")
    assert code == 2 and "no event history here" in err
    assert not (tmp_path / "state").exists()


def test_ack_json(capsys, config, store):
    assert run(capsys, "ack", "-c", config, "--all", "--json") == (0, "[]\n", "")
    fire(store, "ecc-uncorrectable", "npu2/chip0")
    code, out, _ = run(capsys, "ack", "-c", config, "ecc-uncorrectable", "npu2/chip0", "--json")
    assert code == 0 and json.loads(out) == [{"rule": "ecc-uncorrectable", "subject": "npu2/chip0",
                                              "summary": "ecc-uncorrectable summary", "already_acknowledged": False}]
    code, out, _ = run(capsys, "ack", "-c", config, "--all", "--json")
    assert [row["already_acknowledged"] for row in json.loads(out)] == [True]


def test_a_history_this_user_cannot_open_says_permission_denied(run, tmp_path, monkeypatch):
    config = tmp_path / "npumon.yaml"
    config.write_text("state_dir: {}\n".format(tmp_path / "state"))
    history = str(tmp_path / "state" / "events.sqlite")
    real_stat = os.stat

    def closed_directory(path, *args, **kwargs):  # what a non-root user meets in a 0750 state dir
        if str(path) == history:
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", closed_directory)
    for args in (["events"], ["ack", "health-critical", "npu0/chip0"]):
        code, out, err = run(*args, "--config", str(config))
        assert (code, out) == (2, "") and err == "npumon: {}: permission denied: its directory is closed to this " \
                                                 "user (run as root or as the user npumon runs as)\n".format(history)
    monkeypatch.setattr(os, "stat", real_stat)
    (tmp_path / "state").mkdir()
    open(history, "w").close()
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    code, _, err = run("events", "--config", str(config))
    assert code == 2 and err.endswith("events.sqlite: permission denied: this user cannot read it (run as root or as "
                                      "the user npumon runs as)\n")
