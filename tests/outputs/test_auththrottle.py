"""The basic-auth throttle on a fake clock: growing shut-outs per address, bounded checks, bounded memory."""

from npumon.outputs.auththrottle import Refusal, Throttle, client_key


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def fail(throttle, client, times=1):
    """`times` wrong passwords from `client`; the shut-out after the last."""
    shut = 0.0
    for _ in range(times):
        assert throttle.begin(client) is None
        shut = throttle.end(client, ok=False)
    return shut


def test_an_address_is_shut_out_after_five_wrong_passwords_for_a_growing_time():
    clock = Clock()
    throttle = Throttle(clock=clock)
    assert fail(throttle, "10.0.0.1", 4) == 0.0
    assert fail(throttle, "10.0.0.1") == 1.0
    assert throttle.begin("10.0.0.1") == Refusal("throttled", 1)
    assert (throttle.shut_out("10.0.0.1"), throttle.shut_out("10.0.0.2")) == (1, 0)
    clock.now += 1.0
    assert throttle.shut_out("10.0.0.1") == 0
    assert fail(throttle, "10.0.0.1") == 2.0
    clock.now += 2.0
    assert fail(throttle, "10.0.0.1") == 4.0
    clock.now += 1.5
    assert throttle.begin("10.0.0.1") == Refusal("throttled", 3)  # Retry-After rounds up
    for _ in range(10):
        clock.now += 60.0
        shut = fail(throttle, "10.0.0.1")
    assert shut == 60.0  # at most MAX_DELAY_SECONDS


def test_other_addresses_are_unaffected_and_a_right_password_resets_the_address():
    clock = Clock()
    throttle = Throttle(clock=clock)
    fail(throttle, "10.0.0.1", 5)
    assert throttle.begin("10.0.0.2") is None
    throttle.end("10.0.0.2", ok=True)
    clock.now += 1.0
    assert throttle.begin("10.0.0.1") is None
    assert throttle.end("10.0.0.1", ok=True) == 0.0
    assert fail(throttle, "10.0.0.1", 4) == 0.0  # its free failures are back


def test_checks_at_once_are_bounded_and_no_address_holds_them_all():
    throttle = Throttle(slots=3, clock=Clock())
    assert throttle.begin("10.0.0.1") is None
    assert throttle.begin("10.0.0.1") is None  # no wrong password on record: two jobs of one Prometheus
    assert throttle.begin("10.0.0.1") == Refusal("throttled", 1)  # but not every slot
    assert throttle.begin("10.0.0.2") is None  # the last one is for someone else
    assert throttle.begin("10.0.0.3") == Refusal("busy", 1)  # all slots taken: refused at once, not queued
    throttle.end("10.0.0.1", ok=True)
    throttle.end("10.0.0.1", ok=False)
    assert throttle.begin("10.0.0.1") is None
    assert throttle.begin("10.0.0.1") == Refusal("throttled", 1)  # a guesser: one at a time
    assert throttle.begin("10.0.0.3") is None
    throttle.end("10.0.0.1", ok=False)
    assert throttle.begin("10.0.0.4") is None


def test_the_address_table_is_bounded_and_forgets_quiet_addresses():
    clock = Clock()
    throttle = Throttle(max_addresses=3, forget_after=600.0, clock=clock)
    for i in range(10):
        fail(throttle, "10.0.0.{}".format(i), 5)
        clock.now += 1.0
    assert len(throttle) == 3  # the three most recent; the oldest went first
    assert fail(throttle, "10.0.0.9") == 2.0  # remembered: its sixth wrong password
    assert fail(throttle, "10.0.0.0") == 0.0  # forgotten: its first again
    clock.now += 600.0
    assert throttle.begin("10.0.0.99") is None
    assert len(throttle) == 0  # ten minutes without a wrong password: forgotten


def test_ipv6_clients_count_per_64_and_mapped_ipv4_as_ipv4():
    assert client_key("2001:db8:1:2::1") == client_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("::ffff:127.0.0.2") == "127.0.0.2"
    assert client_key("fe80::1%eth0") == "fe80::/64"
    assert client_key("127.0.0.1") == "127.0.0.1"
    assert client_key("") == ""  # no address known: all such requests share one entry
