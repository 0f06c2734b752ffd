"""Who may have a password checked now: password guessing slowed per client address, bcrypt bounded.

bcrypt costs about 70 ms of a core per check, so unthrottled guessing both burns the daemon's CPU and, if
checks wait for each other, holds the HTTP workers every scraper needs. So (webauth.Guard asks `begin`
before a bcrypt and tells `end` after it; a remembered password asks nothing):

* Per client address, from the `FREE_FAILURES`th wrong password on, each one shuts the address out for a
  growing time (1 s, 2 s, 4 s ... at most `MAX_DELAY_SECONDS`): meanwhile its passwords are answered 429
  with Retry-After at once, without a bcrypt (a remembered one still passes: it needs none). A right
  password resets the address.
* At most `SLOTS` checks at once in all (more: 503 at once). One address never holds them all: an
  address with a wrong password on record gets one at a time, any other (a Prometheus whose jobs start
  at once) one fewer than all (more from it meanwhile: 429 at once), so a new user from another address
  finds a slot free. Nothing waits in a queue: a worker either checks a password now or answers at once,
  so guessing from one address never delays a new user from another.
* IPv6 clients count per /64 (one host usually has a whole /64); IPv4-mapped addresses as IPv4.
* Bounded memory: at most `MAX_ADDRESSES` addresses are remembered, each until `FORGET_AFTER_SECONDS`
  after its last wrong password; at the cap the one quiet longest is forgotten first (someone guessing
  from thousands of addresses can make the oldest forgotten: those get their free failures again).
"""

import ipaddress
import math
import threading
import time
from collections import OrderedDict
from typing import Callable, NamedTuple, Optional

FREE_FAILURES = 5  # the fifth wrong password in a row shuts the address out: a few typos are free
FIRST_DELAY_SECONDS = 1.0
MAX_DELAY_SECONDS = 60.0
FORGET_AFTER_SECONDS = 600.0  # longer than MAX_DELAY_SECONDS, so a shut-out address is never forgotten early
MAX_ADDRESSES = 4096
SLOTS = 3  # bcrypt checks at once (about 70 ms each), so three cores at most


class Refusal(NamedTuple):
    reason: str  # "throttled" (429) or "busy" (503)
    retry_after: int  # seconds, for the Retry-After header


class _Address:
    __slots__ = ("failures", "shut_until", "last_failure")

    def __init__(self) -> None:
        self.failures = 0
        self.shut_until = 0.0
        self.last_failure = 0.0


def client_key(address: str) -> str:
    """What the throttle counts by: the IPv4 address, or the IPv6 /64."""
    if ":" not in address:
        return address  # IPv4 as the socket gives it: asked on every connection, so no parsing
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network("{}/64".format(ip), strict=False))
    return str(ip)


class Throttle:
    """Thread-safe; `clock` is monotonic seconds (tests pass a fake one)."""

    def __init__(self, free_failures: int = FREE_FAILURES, first_delay: float = FIRST_DELAY_SECONDS,
                 max_delay: float = MAX_DELAY_SECONDS, forget_after: float = FORGET_AFTER_SECONDS,
                 max_addresses: int = MAX_ADDRESSES, slots: int = SLOTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.free_failures, self.first_delay, self.max_delay = free_failures, first_delay, max_delay
        self.forget_after, self.max_addresses, self.slots = forget_after, max_addresses, slots
        self._clock = clock
        self._addresses = OrderedDict()  # type: OrderedDict[str, _Address]  # by last failure, oldest first
        self._checking = {}  # type: Dict[str, int]  # checks running, per address
        self._lock = threading.Lock()

    def begin(self, client: str) -> Optional[Refusal]:
        """None: `client` (a key from client_key) may have one password checked now; call end() after it.
        Else why not, at once."""
        now = self._clock()
        with self._lock:
            self._forget(now)
            entry = self._addresses.get(client)
            if _seconds_left(entry, now):
                return Refusal("throttled", _seconds_left(entry, now))
            if self._checking.get(client, 0) >= (1 if entry is not None else max(1, self.slots - 1)):
                return Refusal("throttled", 1)
            if sum(self._checking.values()) >= self.slots:
                return Refusal("busy", 1)
            self._checking[client] = self._checking.get(client, 0) + 1
            return None

    def shut_out(self, client: str) -> int:
        """Seconds (rounded up) `client` is still shut out for; 0 when it is not. Takes no slot."""
        now = self._clock()
        with self._lock:
            return _seconds_left(self._addresses.get(client), now)

    def end(self, client: str, ok: bool) -> float:
        """The check begun for `client` is over; returns for how long a wrong password shut it out (0: not)."""
        now = self._clock()
        with self._lock:
            left = self._checking.pop(client, 1) - 1
            if left:
                self._checking[client] = left
            if ok:
                self._addresses.pop(client, None)
                return 0.0
            entry = self._addresses.pop(client, None) or _Address()
            self._addresses[client] = entry  # at the end: the most recent failure
            entry.failures += 1
            entry.last_failure = now
            while len(self._addresses) > self.max_addresses:
                self._addresses.popitem(last=False)
            over = entry.failures - self.free_failures
            if over < 0:
                return 0.0
            delay = min(self.max_delay, self.first_delay * 2 ** min(over, 32))
            entry.shut_until = now + delay
            return delay

    def __len__(self) -> int:
        with self._lock:
            return len(self._addresses)

    def _forget(self, now: float) -> None:
        while self._addresses:
            oldest = next(iter(self._addresses.values()))
            if now - oldest.last_failure < self.forget_after:
                return
            self._addresses.popitem(last=False)


def _seconds_left(entry: Optional[_Address], now: float) -> int:
    """How long an address is still shut out for, rounded up to whole seconds (Retry-After); 0: it is not."""
    if entry is None or entry.shut_until <= now:
        return 0
    return max(1, math.ceil(entry.shut_until - now))
