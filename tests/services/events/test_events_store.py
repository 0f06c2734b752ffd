"""EventStore on real SQLite files: schema, filters, retention, atomic batches, a reader beside a writer,
and one-line errors for files that are not (or no longer) a usable history."""

import os
import sqlite3
import threading

import pytest

from npumon.services.events.store import (ACKNOWLEDGED, ACTIVE, KINDS, SCHEMA_VERSION, EventStore, EventStoreError, KnownChip,
                           events_path)
from npumon.model import Finding


@pytest.fixture
def path(tmp_path):
    return events_path(str(tmp_path / "state"))


@pytest.fixture
def store(path):
    store = EventStore(path, retention_seconds=3600)
    yield store
    store.close()


def finding(rule="ecc-uncorrectable", subject="npu2/chip0", **changes):
    values = dict(rule=rule, severity="critical", subject=subject, summary="1 double-bit ECC errors",
                  hint="drain it", since=1000.0, labels={"team": "infra"})
    values.update(changes)
    return Finding(**values)


def test_creates_directory_file_schema_and_wal(path, store):
    assert os.path.isfile(path)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_record_and_query_round_trip(store):
    first = store.record("chip_appeared", "npu0/chip0", "appeared", "info", {"bus_id": "0000:C1:00.0"}, time=100.0)
    second = store.record("health_changed", "npu0/chip0", "health Alarm (was OK)", "critical", time=200.0)
    assert second > first
    events = store.query()
    assert [(e.id, e.time, e.kind, e.subject, e.severity, e.message) for e in events] == [
        (first, 100.0, "chip_appeared", "npu0/chip0", "info", "appeared"),
        (second, 200.0, "health_changed", "npu0/chip0", "critical", "health Alarm (was OK)")]
    assert events[0].details == {"bus_id": "0000:C1:00.0"} and events[1].details is None


def test_query_filters(store):
    store.record("chip_appeared", "npu1/chip0", "a", time=100.0)
    store.record("chip_appeared", "npu10/chip0", "b", time=200.0)
    store.record("chip_appeared", "npu1/chip1", "c", time=300.0)
    store.record("finding_fired", "host", "d", "warning", time=400.0)
    store.record("finding_resolved", "npu1/chip0", "e", time=500.0)

    def messages(**kwargs):
        return [event.message for event in store.query(**kwargs)]

    assert messages(npu=1) == ["a", "c", "e"]  # npu1, not npu10
    assert messages(since=200.0, until=400.0) == ["b", "c", "d"]
    assert messages(kinds=["finding_fired", "finding_resolved"]) == ["d", "e"]
    assert messages(limit=2) == ["d", "e"]  # the newest two, oldest first
    assert messages(after_id=store.query()[2].id) == ["d", "e"]
    assert messages(npu=1, since=250.0, kinds=["chip_appeared"]) == ["c"]


def test_events_come_in_time_order_even_when_recorded_late(store):
    store.record("probe_failed", "npu0/chip0", "late", time=300.0)
    store.record("probe_failed", "npu0/chip0", "early", time=100.0)
    assert [event.message for event in store.query()] == ["early", "late"]


def test_unknown_kind_is_refused(store):
    with pytest.raises(ValueError, match="unknown event kind 'finding_fird'"):
        store.record("finding_fird", "host", "typo")
    assert "control_action" in KINDS and "probe_failed" in KINDS


def test_retention_prunes_old_events_only(store):
    store.record("chip_appeared", "npu0/chip0", "old", time=1000.0)
    store.record("chip_appeared", "npu1/chip0", "recent", time=5000.0)
    store.put_finding(finding(), ACTIVE, 1)  # state tables are never pruned
    assert store.prune(now=5000.0 + 3600 - 1) == 1
    assert [event.message for event in store.query()] == ["recent"]
    assert len(store.finding_rows()) == 1
    assert store.prune(now=5000.0 + 3600 - 1) == 0


def test_ids_are_not_reused_after_pruning_everything(store):
    last = store.record("chip_appeared", "npu0/chip0", "x", time=1.0)
    store.prune(now=10 ** 9)
    assert store.record("chip_appeared", "npu0/chip0", "y", time=10 ** 9) > last


def test_findings_chips_and_meta_round_trip(store):
    fired = finding(shadow=True)
    store.put_finding(fired, ACTIVE, 7)
    store.put_finding(finding(rule="health-critical", subject="npu0/chip0"), ACKNOWLEDGED, 9)
    rows = store.finding_rows()
    assert [(row.state, row.finding, row.event_id) for row in rows] == [
        (ACTIVE, fired, 7), (ACKNOWLEDGED, finding(rule="health-critical", subject="npu0/chip0"), 9)]
    store.delete_finding("ecc-uncorrectable", "npu2/chip0")
    assert [row.finding.rule for row in store.finding_rows()] == ["health-critical"]

    chip = KnownChip("npu0/chip0", "910B3", "0000:C1:00.0", "Alarm", ("A4025021", "8C03A000"))
    store.put_chip(chip)
    assert store.known_chips() == {"npu0/chip0": chip}
    store.delete_chip("npu0/chip0")
    assert store.known_chips() == {}

    assert store.get_meta("last_applied_ack_id") is None
    store.set_meta("last_applied_ack_id", "12")
    assert store.get_meta("last_applied_ack_id") == "12"


def test_a_failed_batch_stores_nothing(store):
    with pytest.raises(RuntimeError):
        with store.batch():
            store.record("finding_fired", "host", "fired")
            store.put_finding(finding(subject="host"), ACTIVE, 1)
            raise RuntimeError("crash between the two halves")
    assert store.query() == [] and store.finding_rows() == []
    with store.batch():  # the store is usable afterwards
        store.record("finding_fired", "host", "fired")
    assert len(store.query()) == 1


def test_reopening_keeps_everything(path, store):
    store.record("chip_appeared", "npu0/chip0", "x", time=1.0)
    store.close()
    again = EventStore(path)
    try:
        assert [event.message for event in again.query()] == ["x"]
    finally:
        again.close()


def test_a_reader_sees_committed_events_while_a_writer_writes(path, store):
    reader = EventStore(path, readonly=True)
    written = 1000
    seen_counts = []
    errors = []

    def write():
        for number in range(written):
            with store.batch():  # two rows per transaction: a reader must never see one without the other
                store.record("finding_fired", "npu0/chip0", "fired {}".format(number), "warning")
                store.record("finding_resolved", "npu0/chip0", "resolved {}".format(number), "info")

    writer = threading.Thread(target=write)
    writer.start()
    try:
        while writer.is_alive():
            events = reader.query()
            seen_counts.append(len(events))
            if len(events) % 2:
                errors.append("saw half a transaction: {} events".format(len(events)))
    finally:
        writer.join()
    final = reader.query()
    reader.close()
    assert errors == []
    assert seen_counts == sorted(seen_counts)  # never goes backwards
    assert any(0 < count < 2 * written for count in seen_counts)  # it did read while the writer wrote
    assert len(final) == 2 * written
    with pytest.raises(EventStoreError, match="read-only"):
        with EventStore(path, readonly=True).batch():
            pass


def test_readonly_never_creates_a_history(tmp_path):
    missing = str(tmp_path / "nowhere" / "events.sqlite")
    with pytest.raises(EventStoreError) as error:
        EventStore(missing, readonly=True)
    assert str(error.value) == "{}: no event history here (`npumon run` creates it; is state_dir in the config " \
                               "right?)".format(missing)
    assert not os.path.exists(os.path.dirname(missing))


def test_a_corrupt_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "events.sqlite"
    path.write_bytes(b"this is not SQLite, it is what is left after a bad disk " * 100)
    for readonly in (False, True):
        with pytest.raises(EventStoreError) as error:
            EventStore(str(path), readonly=readonly)
        message = str(error.value)
        assert message.startswith("{}: cannot open the event history: ".format(path))
        assert "not a database" in message and "\n" not in message


def test_someone_elses_database_is_refused(tmp_path):
    path = tmp_path / "events.sqlite"
    conn = sqlite3.connect(str(path))
    conn.execute("CREATE TABLE other (x)")
    conn.commit()
    conn.close()
    with pytest.raises(EventStoreError, match="not an npumon event history"):
        EventStore(str(path))


def test_a_newer_schema_is_refused(path, store):
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = {}".format(SCHEMA_VERSION + 1))
    conn.close()
    with pytest.raises(EventStoreError, match=r"written by a newer npumon \(schema 2, this one knows up to 1\)"):
        EventStore(path, readonly=True)


def test_an_unusable_directory_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")
    with pytest.raises(EventStoreError) as error:
        EventStore(events_path(str(blocker)))
    assert str(error.value) == "{}: cannot open the event history: {} is not a directory".format(
        events_path(str(blocker)), blocker)
