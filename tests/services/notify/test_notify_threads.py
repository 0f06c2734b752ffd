"""Deliveries run on a small bounded pool: eight receivers told of the same finding are sent to at most
DELIVERY_THREADS at a time, every one of them is told, and one that does not answer does not stop the others."""

import threading
import time

from npumon.services.notify.outbox import Outbox
from npumon.services.notify.receiver import Receiver
from npumon.services.notify.service import DELIVERY_THREADS, NotifyService
from recording_server import RecordingServer
from npumon.services.notify.config import ReceiverConfig
from test_notify_delivery import Harness, finding, harnesses

import pytest


class PooledHarness(Harness):
    """The service with its own delivery threads, as the daemon runs it."""

    def _start(self):
        receivers = {config.name: Receiver.from_config(config, index, "<test>")
                     for index, config in enumerate(self.notify.receivers)}
        return NotifyService(self.notify, receivers, {}, Outbox(str(self.tmp_path), self.notify.outbox_max_notifications),
                             self.rule_for, self.events, clock=self.clock)


@pytest.fixture
def harness(tmp_path):
    yield from harnesses(tmp_path, PooledHarness)


class Concurrency:
    """A receiver's answer after `seconds`, counting the requests in progress at once; `hang` paths wait
    `hang_seconds` or until `released` is set (so that a test that has seen what it waited for does not wait
    out the hang in its teardown)."""

    def __init__(self, seconds=0.2, hang=(), hang_seconds=3.0):
        self.seconds, self.hang, self.hang_seconds = seconds, hang, hang_seconds
        self.released = threading.Event()
        self.now = self.most = 0
        self._lock = threading.Lock()

    def __call__(self, request):
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        if request.path in self.hang:
            self.released.wait(self.hang_seconds)
        else:
            time.sleep(self.seconds)
        with self._lock:
            self.now -= 1
        return 200, {}, b"ok"


def receivers(server, **settings):
    return [ReceiverConfig(name="hook{}".format(n), type="webhook", url=server.url("/hook{}".format(n)), **settings)
            for n in range(8)]


def wait_for(condition, seconds=20.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_eight_receivers_are_all_told_on_at_most_the_delivery_threads(harness):
    answer = Concurrency()
    with RecordingServer(answer) as server:
        before = threading.active_count()
        h = harness(*receivers(server))
        h.evaluate(finding())
        assert wait_for(lambda: len(server.requests) == 8), len(server.requests)
        assert answer.most <= DELIVERY_THREADS == 2
        assert threading.active_count() - before <= DELIVERY_THREADS + 8  # the server's handlers aside
        assert sorted(request.path for request in server.requests) == ["/hook{}".format(n) for n in range(8)]


def test_a_receiver_that_does_not_answer_leaves_a_thread_to_the_others(harness):
    answer = Concurrency(seconds=0.05, hang=("/hook0",), hang_seconds=4.0)
    with RecordingServer(answer) as server:
        h = harness(*receivers(server, timeout_seconds=10))
        began = time.monotonic()
        h.evaluate(finding())
        assert wait_for(lambda: len([r for r in server.requests if r.path != "/hook0"]) == 7)
        assert time.monotonic() - began < 3.0  # not after the hanging receiver's answer
        answer.released.set()
