"""The notifier service with a real SQLite outbox and real HTTP receivers on 127.0.0.1, on a controlled
clock, deliveries run inline: queueing, grouping, rate limits, retries, refusals, repeats, restarts and the
outbox bound."""

import dataclasses
import itertools
import json
import logging
import shutil
import sqlite3
import subprocess
from concurrent.futures import Executor, Future

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from npumon.model import Finding, HostSample, Snapshot
from npumon.services.notify.config import NotifyConfig, ReceiverConfig, RouteConfig
from npumon.services.notify.outbox import OUTBOX_FILE, Outbox
from npumon.services.notify.receiver import Receiver
from npumon.services.notify.routing import group_due, one_per_alert, receivers_for, route_matches
from npumon.services.notify.service import IDLE_TICK_SECONDS, MIN_WAKE_SECONDS, NotifyService, notify_services
from recording_server import RecordingServer, json_reply
from service_context import close_context, open_context, recorded
from test_notify_receivers import alert

T0 = 1767225600.0
TOKEN = "hook-t0ken-abcdef123"


class Clock:
    def __init__(self, now=T0):
        self.now = now

    def __call__(self):
        return self.now


class InlineExecutor(Executor):
    """Runs a delivery on the calling thread, so a test sees its effect right away."""

    def submit(self, fn, *args, **kwargs):
        future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


class Events:
    def __init__(self):
        self.recorded = []

    def __call__(self, kind, subject, message, severity=None, details=None):
        self.recorded.append((kind, subject, message, severity, details))


def finding(rule="health-alarm", subject="npu0/chip0", severity="critical", since=T0 - 30, shadow=False, labels=None):
    return Finding(rule=rule, severity=severity, subject=subject, summary="{} on {}".format(rule, subject),
                   hint="look", since=since, labels=labels or {}, shadow=shadow)


class Harness:
    """A NotifyService on tmp_path's outbox, with `evaluate(findings)` and `tick()` at the clock's time."""

    def __init__(self, tmp_path, receivers, routes=(), rule_for=None, **notify_settings):
        self.tmp_path = tmp_path
        self.clock = Clock()
        self.events = Events()
        self.notify = NotifyConfig(receivers=list(receivers), routes=list(routes), **notify_settings)
        self.rule_for = rule_for or {}
        self.service = self._start()

    def _start(self):
        receivers = {config.name: Receiver.from_config(config, index, "<test>")
                     for index, config in enumerate(self.notify.receivers)}
        outbox = Outbox(str(self.tmp_path), self.notify.outbox_max_notifications)
        return NotifyService(self.notify, receivers, {}, outbox, self.rule_for, self.events, clock=self.clock,
                             executor=InlineExecutor(), **self.options())

    def options(self):
        return {}

    def restart(self):
        self.service.close()
        self.service = self._start()

    def evaluate(self, *findings, at=None, transitions=()):
        if at is not None:
            self.clock.now = at
        snapshot = Snapshot(time=self.clock.now, host=HostSample(hostname="h"), chips=[], sources={})
        self.service.on_evaluation(snapshot, list(findings), list(transitions))

    def tick(self, at):
        self.clock.now = at
        self.service.tick()

    def rows(self):
        with sqlite3.connect(str(self.tmp_path / OUTBOX_FILE)) as db:
            return db.execute("SELECT receiver, status, state, attempts, last_error FROM notifications "
                              "ORDER BY id").fetchall()

    def metrics(self):
        registry = CollectorRegistry()
        for collector in self.service.collectors():
            registry.register(collector)
        samples = {}
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples


def harnesses(tmp_path, kind=Harness):
    """The body of a `harness` fixture: make(*receivers, **settings) gives a new `kind` each call,
    and every service made is closed when the test ends."""
    made = []

    def make(*receivers, **settings):
        made.append(kind(tmp_path, receivers, **settings))
        return made[-1]

    yield make
    for item in made:
        item.service.close()


@pytest.fixture
def harness(tmp_path):
    yield from harnesses(tmp_path)


def webhook(server, name="hook", **settings):
    return ReceiverConfig(name=name, type="webhook", url=server.url("/hook?token=" + TOKEN), **settings)


def alerts_of(request):
    return [(item["labels"]["alertname"], item["labels"]["subject"], item["status"]) for item in request.json()["alerts"]]


# ------------------------------------------------------------------------------------------ basics

def test_fired_and_resolved_are_each_delivered_once_with_one_fingerprint(harness):
    with RecordingServer() as server:
        h = harness(webhook(server))
        h.evaluate(finding())
        h.evaluate(finding(), at=T0 + 15)  # still firing: nothing new
        h.evaluate(at=T0 + 45)  # gone: resolved
        h.tick(T0 + 46)
        fired, resolved = server.requests
    assert alerts_of(fired) == [("health-alarm", "npu0/chip0", "firing")]
    assert alerts_of(resolved) == [("health-alarm", "npu0/chip0", "resolved")]
    first, last = fired.json()["alerts"][0], resolved.json()["alerts"][0]
    assert first["fingerprint"] == last["fingerprint"] and first["startsAt"] == last["startsAt"]
    assert last["endsAt"] == "2026-01-01T00:00:45Z"
    assert h.rows() == []


def test_shadow_findings_are_never_notified(harness):
    with RecordingServer() as server:
        h = harness(webhook(server))
        h.evaluate(finding(shadow=True))
        h.tick(T0 + 100)
        assert server.requests == [] and h.rows() == []


def test_routes_pick_receivers_and_every_match_adds_its_own(harness):
    with RecordingServer() as pager, RecordingServer() as chat:
        h = harness(webhook(pager, "pager"), webhook(chat, "chat"), routes=[
            RouteConfig(receivers=["pager"], severity=["critical"]),
            RouteConfig(receivers=["chat"], rule=["temperature-*", "health-*"]),
        ])
        h.evaluate(finding(), finding(rule="temperature-warning", severity="warning"),
                   finding(rule="numa-balancing-enabled", severity="info", subject="host"))
        assert [alerts_of(r) for r in pager.requests] == [[("health-alarm", "npu0/chip0", "firing")]]
        assert [sorted(alerts_of(r)) for r in chat.requests] == [[("health-alarm", "npu0/chip0", "firing"),
                                                                   ("temperature-warning", "npu0/chip0", "firing")]]


def test_route_matching_is_pure_and_exact():
    route = RouteConfig(receivers=["x"], severity=["critical", "warning"], rule=["temperature-*"],
                        labels={"team": "infra"})
    assert route_matches(route, alert(rule="temperature-critical", labels={"team": "infra"}))
    assert not route_matches(route, alert(rule="temperature-critical", labels={"team": "ops"}))
    assert not route_matches(route, alert(rule="health-alarm", labels={"team": "infra"}))
    assert not route_matches(route, alert(rule="temperature-warning", severity="info", labels={"team": "infra"}))
    assert receivers_for(alert(), [], ["a", "b"]) == ["a", "b"]
    assert receivers_for(alert(), [RouteConfig(receivers=["b"], severity=["info"])], ["a", "b"]) == []


# ------------------------------------------------------------------------------------------ grouping

def test_a_burst_within_the_group_interval_becomes_one_message(harness):
    with RecordingServer() as server:
        h = harness(webhook(server, group_interval_seconds=30))
        h.evaluate(finding(subject="npu0/chip0"))  # the first after a quiet spell goes at once
        h.evaluate(finding(subject="npu0/chip0"), finding(subject="npu1/chip0"), at=T0 + 10)
        h.evaluate(finding(subject="npu0/chip0"), finding(subject="npu1/chip0"), finding(subject="npu2/chip0"),
                   at=T0 + 20)
        h.tick(T0 + 29)
        assert len(server.requests) == 1
        h.tick(T0 + 30)
        first, second = server.requests
    assert alerts_of(first) == [("health-alarm", "npu0/chip0", "firing")]
    assert alerts_of(second) == [("health-alarm", "npu1/chip0", "firing"), ("health-alarm", "npu2/chip0", "firing")]


def test_group_wait_holds_the_first_message_for_company(harness):
    with RecordingServer() as server:
        h = harness(webhook(server, group_wait_seconds=10))
        h.evaluate(finding(subject="npu0/chip0"))
        h.evaluate(finding(subject="npu0/chip0"), finding(subject="npu1/chip0"), at=T0 + 5)
        h.tick(T0 + 9)
        assert server.requests == []
        h.tick(T0 + 10)
        (request,) = server.requests
    assert len(request.json()["alerts"]) == 2


def test_a_state_change_of_the_same_alert_waits_for_the_next_message(harness):
    with RecordingServer() as server:
        h = harness(webhook(server, group_wait_seconds=10, group_interval_seconds=0))
        h.evaluate(finding())
        h.evaluate(at=T0 + 2)  # resolved before the first message went out
        h.tick(T0 + 10)
        h.tick(T0 + 12)  # the resolved notification, too, waited group_wait
        fired, resolved = server.requests
    assert alerts_of(fired) == [("health-alarm", "npu0/chip0", "firing")]
    assert alerts_of(resolved) == [("health-alarm", "npu0/chip0", "resolved")]


def test_group_due_and_one_per_alert():
    assert not group_due(100, None, None, 0, 0)
    assert group_due(100, 100, None, 0, 30)
    assert not group_due(100, 95, 80, 0, 30) and group_due(110, 95, 80, 0, 30)
    assert not group_due(100, 95, None, 10, 0) and group_due(105, 95, None, 10, 0)
    items = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("d", 5)]
    assert one_per_alert(items, lambda item: item[0], 10) == [("a", 1), ("b", 2), ("c", 4), ("d", 5)]
    assert one_per_alert(items, lambda item: item[0], 2) == [("a", 1), ("b", 2)]


# ------------------------------------------------------------------------------------------ rate limit

def test_rate_limit_aggregates_instead_of_dropping(harness):
    with RecordingServer(json_reply({"errcode": 0, "errmsg": "ok"})) as server:
        chat = ReceiverConfig(name="chat", type="dingtalk", url=server.url("/robot/send?access_token=" + TOKEN),
                              max_per_minute=2, group_interval_seconds=0)
        h = harness(chat)
        for n in range(6):
            h.evaluate(*[finding(subject="npu{}/chip0".format(i)) for i in range(n + 1)], at=T0 + n)
        assert len(server.requests) == 2  # the limit
        h.tick(T0 + 59)
        assert len(server.requests) == 2
        h.tick(T0 + 60)
        assert len(server.requests) == 3
        texts = [request.json()["markdown"]["text"] for request in server.requests]
    assert texts[2].count("[CRITICAL]") == 4  # npu2..npu5 in one message
    assert sum(text.count("[CRITICAL]") for text in texts) == 6
    assert h.rows() == []
    assert h.metrics()[("npumon_notifications_total", (("receiver", "chat"), ("result", "delivered")))] == 6


# ------------------------------------------------------------------------------------------ retries and refusals

def test_5xx_is_retried_with_backoff_until_delivered(harness):
    answers = iter([503, 502, 200])
    with RecordingServer(lambda request: (next(answers), {}, b"busy")) as server:
        h = harness(webhook(server), retry_initial_seconds=2, retry_max_seconds=60)
        h.evaluate(finding())
        assert len(server.requests) == 1 and h.rows()[0][2:4] == ("pending", 1)
        h.tick(T0 + 0.9)  # backoff: at least half of the 2 s step
        assert len(server.requests) == 1
        h.tick(T0 + 2.01)  # at most the full step
        assert len(server.requests) == 2
        h.tick(T0 + 2.01 + 1.9)
        assert len(server.requests) == 2  # second step: 2..4 s
        assert h.metrics()[("npumon_notification_receiver_up", (("receiver", "hook"),))] == 0
        h.tick(T0 + 2.01 + 4.01)
        assert len(server.requests) == 3
    assert h.rows() == []
    metrics = h.metrics()
    assert metrics[("npumon_notifications_total", (("receiver", "hook"), ("result", "retried")))] == 2
    assert metrics[("npumon_notifications_total", (("receiver", "hook"), ("result", "delivered")))] == 1
    assert metrics[("npumon_notification_receiver_up", (("receiver", "hook"),))] == 1
    (event,) = h.events.recorded  # the start of the outage, not every retry
    assert event[0] == "notification_failed" and "HTTP 503: busy" in event[2]


def test_retry_after_is_honoured(harness):
    answers = iter([429, 200])
    with RecordingServer(lambda request: (next(answers), {"Retry-After": "20"}, b"")) as server:
        h = harness(webhook(server))
        h.evaluate(finding())
        h.tick(T0 + 19)
        assert len(server.requests) == 1
        h.tick(T0 + 20)
        assert len(server.requests) == 2


def test_other_4xx_is_final_and_recorded_with_the_answer(harness):
    with RecordingServer(lambda request: (400, {}, b'{"error":"bad alert"}')) as server:
        h = harness(webhook(server))
        h.evaluate(finding())
        h.tick(T0 + 600)
        assert len(server.requests) == 1
    assert h.rows() == [("hook", "firing", "failed", 1, 'HTTP 400: {"error":"bad alert"}')]
    (event,) = h.events.recorded
    kind, subject, message, severity, details = event
    assert (kind, subject, severity) == ("notification_failed", "receiver/hook", "critical")
    assert details["answer"] == 'HTTP 400: {"error":"bad alert"}'
    assert details["alerts"] == [{"rule": "health-alarm", "subject": "npu0/chip0", "status": "firing"}]
    assert h.metrics()[("npumon_notifications_total", (("receiver", "hook"), ("result", "failed")))] == 1
    assert h.metrics()[("npumon_notification_outbox_length", (("receiver", "hook"),))] == 0


def test_secrets_stay_out_of_logs_events_and_the_outbox(harness, caplog):
    caplog.set_level(logging.DEBUG)
    with RecordingServer(lambda request: (401, {}, ("invalid token " + TOKEN).encode())) as server:
        h = harness(webhook(server))
        h.evaluate(finding())
        url = server.url("/hook?token=" + TOKEN)
    down = harness(ReceiverConfig(name="down", type="webhook", url=url))  # the server is gone now
    down.evaluate(finding())
    assert "invalid token <secret>" in caplog.text and "Connection refused" in caplog.text
    assert TOKEN not in caplog.text
    assert TOKEN not in json.dumps(h.events.recorded + down.events.recorded)
    assert TOKEN not in json.dumps(h.rows() + down.rows())


# ------------------------------------------------------------------------------------------ repeats

def test_a_firing_alert_is_repeated_and_repeats_do_not_pile_up_while_down(harness):
    answers = itertools.chain([200, 200, 503, 503], itertools.repeat(200))
    with RecordingServer(lambda request: (next(answers), {}, b"")) as server:
        h = harness(webhook(server, repeat_seconds=100, group_interval_seconds=0), retry_max_seconds=30)
        h.evaluate(finding())
        h.tick(T0 + 99)
        assert len(server.requests) == 1
        h.tick(T0 + 100)
        assert len(server.requests) == 2 and alerts_of(server.requests[1]) == [("health-alarm", "npu0/chip0", "firing")]
        h.tick(T0 + 200)  # repeat due, receiver fails
        for at in range(201, 500, 10):  # down for long: still one repeat pending, not three
            assert len([row for row in h.rows() if row[2] == "pending"]) <= 1
            h.tick(T0 + at)
    # 2 deliveries, the repeat at +200 failing twice then delivered, then one repeat every 100 s after it
    assert len(server.requests) == 7


def test_send_resolved_false_sends_no_resolved(harness):
    with RecordingServer() as server:
        h = harness(webhook(server, send_resolved=False))
        h.evaluate(finding())
        h.evaluate(at=T0 + 60)
        h.tick(T0 + 120)
        assert [alerts_of(r) for r in server.requests] == [[("health-alarm", "npu0/chip0", "firing")]]


# ------------------------------------------------------------------------------------------ restarts

def test_after_a_restart_a_finding_gets_its_for_plus_grace_to_come_back(harness):
    with RecordingServer() as server:
        h = harness(webhook(server, group_interval_seconds=0), rule_for={"health-alarm": 60},
                    restart_grace_seconds=30)
        h.evaluate(finding(), finding(subject="npu1/chip0"))
        h.restart()  # at T0: the previous run told the receiver two alerts are firing
        h.evaluate(finding(since=T0 + 5), at=T0 + 5)  # npu0 fired again in the new engine, with a new since
        h.evaluate(finding(since=T0 + 5), at=T0 + 89)  # npu1 not back yet, within for + grace
        assert len(server.requests) == 1
        h.evaluate(finding(since=T0 + 5), at=T0 + 90)
        assert alerts_of(server.requests[1]) == [("health-alarm", "npu1/chip0", "resolved")]
        h.evaluate(at=T0 + 100)
        last = server.requests[2].json()["alerts"][0]
    assert len(server.requests) == 3  # npu0 was never announced twice
    assert last["status"] == "resolved" and last["startsAt"] == "2025-12-31T23:59:30Z"  # the first since


def test_after_a_restart_the_engine_saying_resolved_wins_over_the_grace(harness):
    with RecordingServer() as server:
        h = harness(webhook(server), restart_grace_seconds=600)
        h.evaluate(finding())
        h.restart()
        h.evaluate(at=T0 + 5)
        assert len(server.requests) == 1
        h.evaluate(at=T0 + 20, transitions=[("resolved", finding())])
        assert alerts_of(server.requests[1]) == [("health-alarm", "npu0/chip0", "resolved")]


def test_notifications_queued_before_a_restart_are_sent_after_it(harness):
    with RecordingServer() as server:
        url = server.url("/hook")
    h = harness(ReceiverConfig(name="hook", type="webhook", url=url))
    h.evaluate(finding())
    assert h.rows()[0][:3] == ("hook", "firing", "pending")
    h.service.close()
    with RecordingServer(port=int(url.split(":")[2].split("/")[0])) as server:
        h.service = h._start()
        h.tick(T0 + 1)
        assert alerts_of(server.requests[0]) == [("health-alarm", "npu0/chip0", "firing")]
    assert h.rows() == []


def test_a_removed_receiver_loses_its_queue_with_a_count(harness, tmp_path, caplog):
    with RecordingServer() as server:
        url = server.url("/hook")
    h = harness(ReceiverConfig(name="old", type="webhook", url=url))
    h.evaluate(finding())
    h.service.close()
    h.notify = NotifyConfig(receivers=[ReceiverConfig(name="new", type="webhook", url=url)])
    h.service = h._start()
    assert h.rows() == []
    assert "dropped the 1 oldest notification(s) for 'old': the receiver is no longer configured" in caplog.text


# ------------------------------------------------------------------------------------------ when the tick runs

class Scheduled(Harness):
    """The tick runs as the daemon runs it: every IDLE_TICK_SECONDS, or when the service asks for it sooner
    (`wake`, the scheduler's run_soon), and at no other time."""

    def options(self):
        self.next_run = self.clock.now + IDLE_TICK_SECONDS  # the job's first run: after one interval
        return {"wake": self._wake}

    def _wake(self, seconds):
        assert seconds >= MIN_WAKE_SECONDS
        self.next_run = self.clock.now + seconds

    def run(self, until):
        """Run the ticks due until `until`; the seconds after T0 at which they ran."""
        ticks = []
        while self.next_run <= until:
            self.clock.now = self.next_run
            self.next_run = self.clock.now + IDLE_TICK_SECONDS  # the interval resumes after each run
            self.service.tick()
            ticks.append(round(self.clock.now - T0, 3))
        self.clock.now = until
        return ticks


@pytest.fixture
def scheduled(tmp_path):
    yield from harnesses(tmp_path, Scheduled)


def test_with_nothing_due_the_tick_runs_only_at_its_interval(scheduled):
    with RecordingServer() as server:
        h = scheduled(webhook(server))
        h.evaluate()
        assert h.run(T0 + 120) == [30, 60, 90, 120]  # not once a second
        h.evaluate(finding(), at=T0 + 125)  # delivered at once, nothing left: no tick asked for
        assert h.run(T0 + 179) == [150] and len(server.requests) == 1


def test_a_retry_runs_when_its_backoff_ends_not_at_the_next_interval(scheduled):
    answers = iter([503, 502, 200])
    with RecordingServer(lambda request: (next(answers), {}, b"busy")) as server:
        h = scheduled(webhook(server), retry_initial_seconds=2, retry_max_seconds=60)
        h.evaluate(finding())
        ticks = h.run(T0 + 10)
        assert len(server.requests) == 3 and h.rows() == []
    assert len(ticks) == 2 and 1 <= ticks[0] <= 2 and 2 <= ticks[1] - ticks[0] <= 4  # the two backoff steps


def test_the_tick_runs_when_the_group_interval_or_the_rate_limit_lets_the_next_message_go(scheduled):
    with RecordingServer(json_reply({"errcode": 0, "errmsg": "ok"})) as server:
        chat = ReceiverConfig(name="chat", type="dingtalk", url=server.url("/robot/send?access_token=" + TOKEN),
                              max_per_minute=2, group_interval_seconds=20)
        h = scheduled(chat)
        h.evaluate(finding(subject="npu0/chip0"))
        h.evaluate(finding(subject="npu0/chip0"), finding(subject="npu1/chip0"), at=T0 + 5)
        assert h.run(T0 + 25) == [20] and len(server.requests) == 2  # the group interval
        h.evaluate(*[finding(subject="npu{}/chip0".format(n)) for n in range(3)], at=T0 + 45)
        assert h.run(T0 + 70) == [60] and len(server.requests) == 3  # the rate limit: 2 a minute


def test_the_tick_runs_when_a_repeat_falls_due(scheduled):
    with RecordingServer() as server:
        h = scheduled(webhook(server, repeat_seconds=12, group_interval_seconds=0))
        h.evaluate(finding())
        assert h.run(T0 + 40) == [12, 24, 36]
        assert len(server.requests) == 4


def test_after_a_restart_the_first_evaluation_asks_for_what_was_left(scheduled):
    answers = iter([503, 200])
    with RecordingServer(lambda request: (next(answers), {}, b"busy")) as server:
        h = scheduled(webhook(server), retry_initial_seconds=20, retry_max_seconds=20)
        h.evaluate(finding())
        h.restart()  # the backoff was the old service's: the new one may send at once
        h.evaluate(finding(), at=T0 + 3)
        assert h.run(T0 + 10) == [4] and len(server.requests) == 2


# ------------------------------------------------------------------------------------------ the bound

def test_a_full_outbox_drops_the_oldest_logs_and_counts(harness, caplog):
    with RecordingServer() as server:
        url = server.url("/hook")
    h = harness(ReceiverConfig(name="hook", type="webhook", url=url), outbox_max_notifications=3)
    h.evaluate(*[finding(subject="npu{}/chip0".format(n)) for n in range(5)])
    assert len(h.rows()) == 3
    assert "dropped the 2 oldest notification(s) for 'hook': the outbox is full" in caplog.text
    metrics = h.metrics()
    assert metrics[("npumon_notifications_total", (("receiver", "hook"), ("result", "dropped")))] == 2
    assert metrics[("npumon_notification_outbox_length", (("receiver", "hook"),))] == 3
    h.tick(T0 + 30)
    assert h.metrics()[("npumon_notification_outbox_oldest_age_seconds", (("receiver", "hook"),))] == 30
    h.service.close()
    with RecordingServer(port=int(url.split(":")[2].split("/")[0])) as server:
        h.service = h._start()
        h.tick(T0 + 31)
        (request,) = server.requests
    assert [a[1] for a in alerts_of(request)] == ["npu2/chip0", "npu3/chip0", "npu4/chip0"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian: prometheus)")
def test_metrics_pass_promtool(harness):
    with RecordingServer() as server:
        h = harness(webhook(server), webhook(server, "other"))
        h.evaluate(finding())
        registry = CollectorRegistry()
        for collector in h.service.collectors():
            registry.register(collector)
        exposition = generate_latest(registry)
    lint = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True, timeout=30)
    assert lint.returncode == 0 and lint.stdout == b"" and lint.stderr == b"", lint


# ------------------------------------------------------------------------------------------ set-up problems

def test_a_receiver_with_a_missing_secret_is_reported_and_its_notifications_wait(tmp_path, monkeypatch, caplog):
    from npumon.settings import parse_config

    monkeypatch.delenv("NPUMON_TEST_MISSING", raising=False)
    config = parse_config("state_dir: {}\nnotify:\n  receivers:\n    - name: pd\n      type: pagerduty\n"
                          "      routing_key_env: NPUMON_TEST_MISSING\n".format(tmp_path), str(tmp_path / "c.yaml"))
    context = open_context(config, tmp_path)
    (service,) = notify_services(context)
    try:
        assert "environment variable NPUMON_TEST_MISSING is not set" in caplog.text
        assert recorded(context) == [("notification_failed", "receiver/pd")]
        service.on_evaluation(Snapshot(time=T0, host=HostSample(), chips=[], sources={}), [finding()], [])
        service.tick()
        assert not service.receiver_up("pd")
    finally:
        service.close()
        close_context(context)
    assert Outbox(str(tmp_path), 10).backlog()["pd"].pending == 1


def test_an_unusable_state_dir_keeps_notifications_on_in_memory_with_one_error(tmp_path, caplog):
    from npumon.settings import parse_config

    blocker = tmp_path / "file"
    blocker.write_text("")
    # A closed loopback port: the delivery thread fails at once and stays off the network.
    config = parse_config("state_dir: {}\nnotify:\n  receivers:\n    - {{name: a, type: webhook, url: 'http://127.0.0.1:9/'}}\n"
                          .format(blocker), "c.yaml")
    config = dataclasses.replace(config, events=dataclasses.replace(config.events, enabled=False))  # its file too
    (service,) = notify_services(open_context(config, tmp_path))  # notifications are not turned off for the run
    try:
        service.on_evaluation(Snapshot(time=T0, host=HostSample(), chips=[], sources={}), [finding()], [])
        # The delivery thread's own failure may or may not have been logged by now; the outbox's errors are counted.
        problems = [record.getMessage() for record in caplog.records
                    if record.levelno >= logging.WARNING and record.name == "npumon.services.notify.outbox"]
        assert problems == ["notification outbox: cannot open {}/outbox.sqlite: {} is not a directory (notifications "
                            "are kept in memory and still sent; retrying with backoff up to 60s)".format(blocker, blocker)]
        registry = CollectorRegistry()
        for collector in service.collectors():
            registry.register(collector)
        text = generate_latest(registry).decode()
        assert "npumon_notification_outbox_up 0.0" in text
        assert 'npumon_notifications_unpersisted_total{receiver="a"} 1.0' in text
        assert 'npumon_notification_outbox_length{receiver="a"} 1.0' in text
    finally:
        service.close()


def test_no_receivers_no_service(tmp_path):
    from npumon.settings import Config

    context = open_context(Config(state_dir=str(tmp_path)), tmp_path)
    assert notify_services(context) == []
    close_context(context)


def test_the_daemon_runs_the_tick_when_the_service_asks(tmp_path):
    from npumon.settings import parse_config

    asked = []
    config = parse_config("state_dir: {}\nnotify:\n  receivers:\n    - {{name: a, type: webhook, "
                          "url: 'http://127.0.0.1:9/'}}\n".format(tmp_path), "c.yaml")
    context = dataclasses.replace(open_context(config, tmp_path),
                                  run_soon=lambda job_id, seconds: asked.append((job_id, seconds)))
    (service,) = notify_services(context)
    try:
        (job,) = service.jobs()
        Outbox(str(tmp_path), 10).record([("a", alert())], [], T0)  # left by an earlier run, due now
        service.close()
        (service,) = notify_services(context)
        service.on_evaluation(Snapshot(time=T0, host=HostSample(), chips=[], sources={}), [], [])
        assert [(job_id, round(seconds)) for job_id, seconds in asked] == [(job[0], MIN_WAKE_SECONDS)]
    finally:
        service.close()
        close_context(context)
