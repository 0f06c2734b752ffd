"""THE list of services, built from a ServiceContext alone: in any order, every service can record into the
event history from the moment it is built; the set running for one config puts its collectors on /metrics
and takes them off again."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from npumon.settings import parse_config
from npumon.daemon import services as services_module
from npumon.daemon.services import SERVICES, ServiceSet, build_services
from npumon.model import HostSample, Snapshot, SourceStatus
from service_context import close_context, open_context, recorded

BROKEN_RECEIVER = ("notify:\n  receivers:\n    - name: pd\n      type: pagerduty\n"
                   "      routing_key_env: NPUMON_TEST_UNSET\n")


@pytest.mark.parametrize("order", [SERVICES, tuple(reversed(SERVICES))], ids=["listed", "reversed"])
def test_services_build_in_any_order_and_record_from_the_start(tmp_path, monkeypatch, order):
    monkeypatch.delenv("NPUMON_TEST_UNSET", raising=False)
    monkeypatch.setattr(services_module, "SERVICES", order)
    context = open_context(parse_config("state_dir: {}\n{}".format(tmp_path, BROKEN_RECEIVER)), tmp_path)
    services = build_services(context)
    try:
        assert sorted(service.name for service in services) == ["events", "notify"]
        # the notifier's complaint about its receiver, made while it was being built
        assert recorded(context) == [("notification_failed", "receiver/pd")]
    finally:
        for service in services:
            service.close()


class Counting:
    """A service that shows one status and one metric; `broken` makes its evaluation fail."""

    def __init__(self, name, broken=False):
        self.name, self.broken, self.evaluations = name, broken, 0

    def jobs(self):
        return [(self.name + "-tick", 5.0, lambda: None)]

    def on_evaluation(self, snapshot, findings, transitions):
        if self.broken:
            raise RuntimeError("a bug")
        self.evaluations += 1

    def collectors(self):
        return [self]

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily("npumon_test_" + self.name, "A test service's gauge.", value=self.evaluations)

    def statuses(self):
        return {self.name: SourceStatus(ok=not self.broken)}

    def close(self):
        self.closed = True


def test_a_service_set_shows_its_services_and_takes_them_off_when_closed():
    registry = CollectorRegistry()
    good, bad = Counting("good"), Counting("bad", broken=True)
    running = ServiceSet([bad, good], registry)
    shown = running.evaluated(Snapshot(time=0.0, host=HostSample(), chips=[], sources={}), [], [])
    assert shown == {"good": SourceStatus(ok=True), "bad": SourceStatus(ok=False)}  # the bug costs its own part
    assert good.evaluations == 1 and "npumon_test_good 1.0" in generate_latest(registry).decode()
    assert [job_id for job_id, _, _ in running.jobs()] == ["bad-tick", "good-tick"]
    running.close()
    assert good.closed and bad.closed and list(running) == []
    assert "npumon_test_good" not in generate_latest(registry).decode()


def test_no_service_without_its_config(tmp_path):
    context = open_context(parse_config("state_dir: {}\nevents: {{enabled: false}}\n".format(tmp_path)), tmp_path)
    assert build_services(context) == []
    close_context(context)
