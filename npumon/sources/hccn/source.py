"""The hccn_tool source: each NPU's RoCE port (link, link history, net health, speed, bandwidth, counters,
optical module, IP configuration), read per chip with `hccn_tool -i <physical id> -<cmd> -g`.

Facts it builds on (shared/reference/hccn/FORMATS.md): `-i` takes the chip's PHYSICAL id (the npu-smi
source's phy_id, or its logical device_id, which equals it on the 8-chip A2 servers; `npu-smi info -m` is
asked once when neither is known yet); a chip that is not ready makes any call wait up to 300 s; exit codes
collide, so answers are judged by their text; `-bandwidth` samples for 1 s; `-optical` is refused on some
boards. Only the 910 family has the ports: on other chips the source asks nothing and reports itself
unsupported.

Every call goes through the shared runner (its slots, output cap, refusal of binary output and shutdown), with
the network section's own deadline. The chips of a tier are polled side by side on the runner's threads (one per
call slot), each chip's commands one after the other: a chip whose call blocks costs one slot until its deadline,
not the other chips' answers, and never the main table (which has a slot of its own). Such a chip is left alone
for `not_ready_retry_seconds`. Each answer is parsed and dropped before the chip's next command runs: a tier
holds at most one answer per chip, never all of its commands' answers.

Before npu-smi has listed the chips, a tier is waiting (SourceStatus.waiting_on "npu-smi"), not down, for its
grace: WAIT_GRACE_TABLE_POLLS of npu-smi's table polls, each given at least its deadline. Past the grace the
waiting is a failure of its own; npu-smi's status says why npu-smi lists none. Once the chips are there, a
tier that had only waited is "not polled yet" until its first poll ends (its calls may wait for a free slot).

Tiers (all read by the daemon and `npumon check --full`, none by a quick check, which must fit NRPE's 10 s):
`hccn` (link, link history, net health, speed), `hccn:stat`, `hccn:bandwidth`, `hccn:optical`,
`hccn:config` (IP, gateway, netdetect address), each with its own interval (network.*_seconds).
"""

import dataclasses
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...model import NOT_POLLED, ChipSample, SourceStatus
from ..base import Outcome, Parts, PollRecorder, Section, SourceContext, SourceSpec, Tier, TierMarks, allowed_age
from ..runner import CommandResult, CommandRunner
from . import parse
from .config import DEFAULT_HCCN_TOOL, NetworkConfig, network_config_problems
from .metrics import METRICS, export
from .optical import parse_optical
from .record import EMPTY, bandwidth_values, chip_facts, changes_within, down_for, host_facts, ip_values, judged_view, \
    link_values, optical_values

log = logging.getLogger(__name__)

NAME = "hccn"
# tier -> (its interval's config key, the commands it asks each chip, polled by a quick `npumon check`)
TIERS = {
    # not quick: 4 calls per chip do not fit NRPE's 10 s beside npu-smi on a 16-chip A3 (`--full` reads them)
    NAME: ("link_seconds", ("-link_stat", "-net_health", "-link", "-speed"), False),
    NAME + ":stat": ("stat_seconds", ("-stat",), False),
    NAME + ":bandwidth": ("bandwidth_seconds", ("-bandwidth",), False),
    NAME + ":optical": ("optical_seconds", ("-optical",), False),
    NAME + ":config": ("config_seconds", ("-ip", "-gateway", "-netdetect"), False),
}
# the tiers whose answers carry faults (link state and flaps, error counters, optical levels): judged soon after
JUDGED_TIERS = frozenset((NAME, NAME + ":stat", NAME + ":optical"))
MAX_PHY_ID = 99  # `-i` takes at most two digits (MAX_PHY_ID_LEN 2)
# The link's state and its negotiated speed change only with a transition, which moves -link_stat's up or down
# count: a chip whose counts are what they were when these were last asked keeps their answers (confirmed as of
# this poll) without asking again, half of the link tier's calls. Asked again at least every LINK_RECHECK_SECONDS,
# and every time where the tool prints no down count (older drivers: a link going down moves no count).
SETTLED_BY_LINK_STAT = {"-link": "link_status", "-speed": "speed_mbps"}
LINK_RECHECK_SECONDS = 600.0
FIRST_CHIPS_WAIT_SECONDS = 1.0
WAIT_GRACE_TABLE_POLLS = 3  # npu-smi's table polls a tier may wait for the chips and not be down
WAITING = "no chips yet: npu-smi has not listed them"
# Each call's deadline in a one-shot `npumon check`: a healthy hccn_tool call takes well under a second.
ONE_SHOT_TIMEOUT_SECONDS = 3.0

Values = Dict[str, Any]
ChipKey = Tuple[int, int]


def has_ports(name: Optional[str]) -> bool:
    """Whether chips of this npu-smi name have an hccn_tool RoCE port: the 910 family (A1, 910B, A3)."""
    return bool(name) and (name.startswith("910") or name.startswith("Ascend910"))


def _answer(command: str, result: CommandResult) -> Tuple[Optional[Values], Optional[str]]:
    """(values, problem) of one answer; ("unsupported") as the problem when the product refuses it."""
    error = parse.classify_error(result.stdout, result.stderr)
    if error is not None:
        if error.kind == "unsupported":
            return None, "unsupported"
        if error.kind == "no_ip" and command == "-ip":
            return ip_values([]), None
        if error.kind == "no_gateway" and command == "-gateway":
            return {"gateway": None, "gateway_configured": False}, None
        if error.kind == "optical_absent" and command == "-optical":
            return {"optical_present": False}, None
        if error.kind in ("not_ready", "no_device"):
            return None, "not ready: " + error.message
        return None, error.message
    if result.returncode != 0:
        return None, result.describe_failure()
    try:
        return _PARSE[command](result.stdout), None
    except parse.HccnParseError as exc:
        return None, "unreadable {} answer: {}".format(command, exc)


_PARSE: Dict[str, Callable[[str], Values]] = {
    "-link": lambda text: {"link_status": parse.parse_link(text)},
    "-link_stat": lambda text: link_values(parse.parse_link_stat(text)),
    "-net_health": lambda text: {"net_health": parse.parse_net_health(text)},
    "-speed": lambda text: {"speed_mbps": parse.parse_speed(text)},
    "-bandwidth": lambda text: bandwidth_values(*parse.parse_bandwidth(text)),
    "-stat": lambda text: {"counters": parse.parse_stat(text)},
    "-optical": lambda text: optical_values(parse_optical(text)),
    "-ip": lambda text: ip_values(parse.parse_ip(text)),
    "-gateway": lambda text: {"gateway": parse.parse_gateway(text), "gateway_configured": True},
    "-netdetect": lambda text: {"netdetect_address": parse.parse_netdetect(text)},
}


class HccnSource:
    name = NAME

    def __init__(self, settings: NetworkConfig, program: List[str], runner: CommandRunner, max_age: float,
                 clock: Callable[[], float] = time.time, check_program: bool = True, wait_grace: float = 45.0):
        """`wait_grace`: seconds a tier may wait for npu-smi's chips and be waiting, not down (build() derives it)."""
        self.settings = settings
        self.wait_grace = wait_grace
        self.program = program
        self.runner = runner
        self.max_age = max_age
        self.clock = clock
        self.check_program = check_program  # False: a target's own tool, not a file to check
        self._lock = threading.Lock()
        self._values: Dict[ChipKey, Dict[str, Tuple[str, float, Any]]] = {}  # field -> (tier, time, value)
        self._moved = TierMarks()  # tiers that stored a value a rule reads other than before (Outcome.changed)
        self._phy: Dict[ChipKey, int] = {}
        self._mapping: Dict[ChipKey, Dict[str, int]] = {}  # ids from `npu-smi info -m`, for chips that carry none
        self._mapping_lock = threading.Lock()
        self._mapping_unsupported = False
        self._chip_locks: Dict[ChipKey, threading.Lock] = {}
        self._blocked_until: Dict[ChipKey, float] = {}  # time.monotonic() until which a not-ready chip rests
        # Chips found not ready, until one of their calls is answered again (not only while they rest: the retry
        # after a rest must not clear the finding for the seconds it takes to time out once more)
        self._not_ready: set = set()
        self._unsupported: set = set()  # commands the product refuses
        # (chip, -link or -speed) -> (-link_stat's counts when it was last asked, time.monotonic() then)
        self._asked_at_counts: Dict[Tuple[ChipKey, str], Tuple[Tuple[int, int], float]] = {}
        # every tier's status; a tier shows once it has been polled (a quick check polls none)
        self.recorder = PollRecorder(NAME, self._allowed, clock)
        self._waiting_since: Dict[str, float] = {}  # tier -> when it began to wait for npu-smi's chips

    def interval(self, tier: str) -> float:
        return float(getattr(self.settings, TIERS[tier][0]))

    def _allowed(self, tier: str) -> float:
        """How old a tier's values may be: a tier the call budget stretches is fresh for its stretched interval."""
        return allowed_age(self.max_age, self.interval(tier) * self.runner.budget.freshness_stretch(tier))

    def tiers(self) -> List[Tier]:
        return [Tier(tier, self.interval(tier), quick=quick, judged=tier in JUDGED_TIERS)
                for tier, (_, _, quick) in TIERS.items()]

    def close(self) -> None:
        pass  # the runner is shared: whoever made it kills its calls

    # -- polling ---------------------------------------------------------------------------------------

    def poll(self, tier: str, chips: Sequence[ChipSample] = ()) -> Optional[float]:
        return self.recorder.execute(tier, lambda started: self._poll(tier, chips, started).paced(
            self.interval(tier), self.runner.budget.stretch(tier)))

    def _poll(self, tier: str, chips: Sequence[ChipSample], started: float) -> Outcome:
        missing = self._program_problem()
        if missing is not None:
            unsupported, why = missing
            return Outcome(error=why, unsupported=True, read=False) if unsupported else Outcome.failed(why)
        port_chips = [chip for chip in chips if has_ports(chip.name)]
        if not chips:
            return self._waiting(tier, started)
        self._done_waiting(tier, started)
        commands = [command for command in TIERS[tier][1] if command not in self._unsupported]
        if not port_chips or not commands:
            what = "no chip of this product has an NPU network port" if not port_chips \
                else "hccn_tool on this product refuses " + " ".join(TIERS[tier][1])
            return Outcome(error="not supported: " + what, unsupported=True)
        targets, problems = self._targets(port_chips)
        due = self.interval(tier) * self.runner.budget.stretch()  # its next run (later while stretched)
        deadline = time.monotonic() + max(due, self.settings.timeout_seconds)
        outcomes: List[Tuple[int, int, List[str]]] = []
        if targets:  # on the runner's threads: one per call slot, however many chips and tiers there are
            outcomes = self.runner.pool.map(lambda target: self._poll_chip(tier, target, commands, deadline, started),
                                            targets, deadline)
        answered = sum(1 for ran, _, _ in outcomes if ran)
        left_out = sum(skipped for _, skipped, _ in outcomes)
        problems += [problem for _, _, chip_problems in outcomes for problem in chip_problems]
        if self._unsupported.issuperset(commands) and not answered:
            return Outcome(error="not supported on this product: " + " ".join(commands), unsupported=True)
        error = None
        if problems:
            error = "{} problem(s) on {} chip(s); first: {}".format(len(problems), len(port_chips), problems[0])
        elif left_out:
            error = "{} call(s) left out: the tier did not finish in time".format(left_out)
        return Outcome(ok=answered > 0 or not problems, error=error, read=answered > 0, left_out=left_out,
                       degraded=bool(problems), changed=self._moved.take(tier))

    def _waiting(self, tier: str, now: float) -> Outcome:
        """A tier without chips to ask: waiting for npu-smi within the grace, then failing."""
        with self._lock:
            waited = now - self._waiting_since.setdefault(tier, now)
        if waited <= self.wait_grace:
            return Outcome.failed(WAITING, waiting_on="npu-smi", retry=FIRST_CHIPS_WAIT_SECONDS)
        return Outcome.failed("{} for {:.0f}s (grace {:.0f}s)".format(WAITING, waited, self.wait_grace),
                              retry=FIRST_CHIPS_WAIT_SECONDS)

    def _done_waiting(self, tier: str, now: float) -> None:
        """npu-smi lists the chips: a tier that had only waited is not polled yet until this poll ends."""
        with self._lock:
            self._waiting_since.pop(tier, None)
        status = self.recorder.last(tier)
        if status.waiting_on is not None and status.last_success is None:
            self.recorder.record(tier, Outcome.failed(NOT_POLLED), now, None)

    def _program_problem(self) -> Optional[Tuple[bool, str]]:
        """(unsupported, why) when hccn_tool cannot be run at all; None when it is there."""
        if not self.check_program:
            return None
        path = self.program[0]
        try:
            os.stat(path)
        except FileNotFoundError:
            return True, "not supported: no hccn_tool at {} (set network.hccn_tool)".format(path)
        except OSError as exc:
            return False, "cannot reach {}: {} (its directory belongs to the driver's run user; run npumon as root " \
                          "or in that group)".format(path, exc.strerror or exc)
        return None

    def _targets(self, chips: Sequence[ChipSample]) -> Tuple[List[Tuple[ChipKey, int]], List[str]]:
        """(chip, physical id) for each chip that can be asked now, and the problems of those that cannot."""
        if any(chip.phy_id is None and chip.device_id is None and chip.key not in self._mapping for chip in chips):
            self._read_mapping()
        targets, problems = [], []
        now = time.monotonic()
        for chip in chips:
            ids = self._mapping.get(chip.key, {})
            phy = next((value for value in (chip.phy_id, chip.device_id, ids.get("phy_id"), ids.get("device_id"))
                        if value is not None), None)
            if phy is None or not 0 <= phy <= MAX_PHY_ID:
                problems.append("{}: no physical id known (npu-smi info -m)".format(chip.subject))
                continue
            with self._lock:
                self._phy[chip.key] = phy
                blocked = self._blocked_until.get(chip.key, 0.0)
            if blocked > now:
                problems.append("{} (phy {}): not ready, left alone for {:.0f}s more".format(
                    chip.subject, phy, blocked - now))
                continue
            targets.append((chip.key, phy))
        return targets, problems

    def _read_mapping(self) -> None:
        """`npu-smi info -m` once for the tiers that need it at the same time; not again where it has no -m."""
        from ..npusmi.identity import read_mapping  # late: the npu-smi package is large

        with self._mapping_lock:
            if self._mapping or self._mapping_unsupported:
                return
            values, problem, self._mapping_unsupported = read_mapping(self.runner, NAME)
            if problem is None:
                self._mapping = values

    def _poll_chip(self, tier: str, target: Tuple[ChipKey, int], commands: Sequence[str], deadline: float,
                   started: float) -> Tuple[int, int, List[str]]:
        """One chip's commands in turn: (answered, left out, problems). A call that runs out of time ends the
        chip's turn: a chip that is not ready would make every one of its calls wait."""
        key, phy = target
        with self._lock:
            chip_lock = self._chip_locks.setdefault(key, threading.Lock())
        # One call per chip at a time across the tiers: a chip that blocks then holds one slot, not one per tier,
        # and the tiers that wait for it see that it was found not ready and leave it alone.
        if not chip_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return 0, len(commands), []
        try:
            return self._ask_chip(tier, key, phy, commands, deadline, started)
        except Exception as exc:  # noqa: BLE001 - a bug must cost this chip's answers, not the whole tier
            log.exception("hccn: polling %s failed", key)
            return 0, 0, ["npu{}/chip{}: internal error: {}".format(key[0], key[1], exc)]
        finally:
            chip_lock.release()

    def _ask_chip(self, tier: str, key: ChipKey, phy: int, commands: Sequence[str], deadline: float,
                  started: float) -> Tuple[int, int, List[str]]:
        subject = "npu{}/chip{}".format(*key)
        answered, problems = 0, []
        with self._lock:
            blocked = self._blocked_until.get(key, 0.0) - time.monotonic()
        if blocked > 0:
            return 0, 0, ["{} (phy {}): not ready, left alone for {:.0f}s more".format(subject, phy, blocked)]
        # A one-shot pass under a budget (`npumon check`) cannot give a chip that hangs the daemon's deadline.
        timeout = self.settings.timeout_seconds if self.runner.not_after is None \
            else min(self.settings.timeout_seconds, ONE_SHOT_TIMEOUT_SECONDS)
        counts: Optional[Tuple[int, int]] = None  # this poll's -link_stat up and down counts
        for index, command in enumerate(commands):
            if command in SETTLED_BY_LINK_STAT and self._settled(key, command, counts, started, tier):
                continue
            result = self.runner.run(["-i", str(phy), command, "-g"], timeout_seconds=timeout,
                                     not_after=deadline, label=tier, program=self.program)
            if not result.started or result.cut_off:
                return answered, len(commands) - index, problems
            if result.timed_out or result.error or result.killed_by_signal:
                problems.append("{} (phy {}) {}: {}".format(subject, phy, command, result.describe_failure()))
                if result.timed_out:
                    with self._lock:
                        self._blocked_until[key] = time.monotonic() + self.settings.not_ready_retry_seconds
                        self._not_ready.add(key)
                    problems[-1] += "; the chip may not be ready (hccn_tool waits up to 300 s for it)"
                return answered, 0, problems
            values, problem = _answer(command, result)
            del result  # parsed: this answer's text goes before the next command's comes
            if problem == "unsupported":
                self._unsupported.add(command)
                continue
            if problem is not None:
                problems.append("{} (phy {}) {}: {}".format(subject, phy, command, problem))
                if problem.startswith("not ready"):
                    with self._lock:
                        self._not_ready.add(key)
                    return answered, 0, problems
                continue
            answered += 1
            if command == "-link_stat" and values and values.get("link_down_count") is not None:
                counts = (values["link_up_count"], values["link_down_count"])
            with self._lock:
                self._not_ready.discard(key)
                fields = self._values.setdefault(key, {})
                for name, value in (values or {}).items():
                    if name not in fields or judged_view(name, fields[name][2]) != judged_view(name, value):
                        self._moved.mark(tier)
                    fields[name] = (tier, started, value)
                if command in SETTLED_BY_LINK_STAT and counts is not None:
                    self._asked_at_counts[(key, command)] = (counts, time.monotonic())
        return answered, 0, problems

    def _settled(self, key: ChipKey, command: str, counts: Optional[Tuple[int, int]], started: float,
                 tier: str) -> bool:
        """Whether -link or -speed would tell nothing new (SETTLED_BY_LINK_STAT); its answer is then confirmed
        as of this poll."""
        if counts is None:
            return False
        name = SETTLED_BY_LINK_STAT[command]
        with self._lock:
            asked = self._asked_at_counts.get((key, command))
            fields = self._values.get(key, {})
            if asked is None or asked[0] != counts or time.monotonic() - asked[1] >= LINK_RECHECK_SECONDS \
                    or name not in fields:
                return False
            fields[name] = (tier, started, fields[name][2])
        return True

    # -- reading ---------------------------------------------------------------------------------------

    def statuses(self, now: float) -> Dict[str, SourceStatus]:
        return {tier: status for tier, status in self.recorder.statuses(now).items() if self.interval(tier) > 0}

    def networks(self, now: float, chips: Sequence[ChipSample]) -> Dict[ChipKey, Optional[Dict[str, Any]]]:
        """Each chip's network object with the values still fresh; None on chips without a port."""
        with self._lock:
            values = {key: dict(fields) for key, fields in self._values.items()}
            phys = dict(self._phy)
            not_ready = set(self._not_ready)
        # each tier's once: the budget's stretch is looked up under its lock, and a chip has about 40 values
        allowed = {tier: self._allowed(tier) for tier in TIERS}
        result: Dict[ChipKey, Optional[Dict[str, Any]]] = {}
        for chip in chips:
            if not has_ports(chip.name):
                result[chip.key] = None
                continue
            network = dict(EMPTY, phy_id=phys.get(chip.key), not_ready=chip.key in not_ready)
            for name, (tier, when, value) in values.get(chip.key, {}).items():
                if now - when <= allowed[tier]:
                    network[name] = value
            result[chip.key] = network
        speeds = [network["speed_mbps"] for network in result.values()
                  if network and network["speed_mbps"] and network["link_status"] == "UP"]
        normal = self.settings.normal_speed_mbps or (max(speeds) if speeds else None)
        window = self.settings.flap_window_seconds
        for network in result.values():
            if network is not None:
                network.update(normal_speed_mbps=normal, flap_window_seconds=window,
                               link_changes_in_window=changes_within(network, window, now),
                               link_down_seconds=down_for(network, now))
        return result

    def contribute(self, parts: Parts, now: float) -> Parts:
        networks = self.networks(now, parts.chips)
        chips = tuple(dataclasses.replace(chip, extra=dict(chip.extra, network=networks[chip.key]))
                      for chip in parts.chips)
        return dataclasses.replace(parts, chips=chips)


def build(context: SourceContext) -> Optional[HccnSource]:
    settings: NetworkConfig = context.config.network
    if not settings.enabled:
        return None
    # The target's own tool stands in for the default one (a simulated host's is a Python module, not a file);
    # a configured hccn_tool is the user's choice.
    own_tool = context.target.hccn_tool_argv if settings.hccn_tool == DEFAULT_HCCN_TOOL else None
    program = list(own_tool) if own_tool else [settings.hccn_tool]
    config = context.config
    wait_grace = WAIT_GRACE_TABLE_POLLS * max(config.poll.table_seconds, config.npu_smi_timeout_seconds)
    return HccnSource(settings, program, context.npu_smi, config.max_age_seconds, context.clock,
                      check_program=not own_tool, wait_grace=wait_grace)


SPEC = SourceSpec(NAME, build, section=Section("network", NetworkConfig, network_config_problems),
                  chip_facts=chip_facts, host_facts=host_facts, metrics=METRICS, export=export)
