"""Fault campaigns: a timed list of fault injections played on a simulated fleet of healthy hosts, with the
ground truth written as it goes, for measuring how well npumon finds, names and hands off faults.

    description: three faults on four hosts
    hosts: 4                 # campaign-01 .. campaign-04, every one an atlas-800i-a2 (8 chips) running `healthy`
    time_scale: 1            # simulated seconds per wall second (the rules' `for:` runs on wall time)
    settle: 120              # simulated seconds after the last injection ends before the scoring
    injections:
      - {host: 1, chip: 3, class: overheat, start: 30, duration: 240}
      - {host: 2, chips: [0, 1, 2, 3], class: job-software-fault, start: 60, duration: 120}
      - {host: 3, class: npu-smi-hang, start: 30, duration: 180}

Times are simulated seconds from the campaign's start (after the hosts' first polls). Each class is a
built-in scenario's fault (CLASSES): its override for the faulty chip is moved onto the injected chip, its
kernel-log lines are moved onto it and start at the injection, its ramps and steps are shifted so that they
start there too, and host-wide classes bring the scenario's host, serving queue and npu-smi behaviour.
At every start and end the runner composes each host's scenario from healthy plus its running injections,
writes it to the host's own scenario file and switches the host to it (simulation.set_scenario). A class that
hangs the DCMI library (dcmi-hang) sets the host's simulated libdcmi.so faults instead (sim/dcmi, faults.py),
just before the switch: that host reads its chips through DCMI for the whole campaign (`collect.backend: dcmi`,
the library built once for the fleet), every other host through npu-smi.

The ground truth is JSON lines: one `campaign` line (hosts, time scale, start, the DCMI hosts), one `injection` line per
injection as it starts (host, chips, subjects, class, scenario, wall and simulated start and end, what it
should produce), one `end` line. campaign_score.py scores it against the hosts' event histories.
"""

import copy
import json
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import yaml

from ..model import chip_subject
from ..rules.loader import load_rules
from ..services.events.store import EventStore, EventStoreError, events_path
from ..sources.kmsg.jobs import WINDOW_SECONDS as JOB_WINDOW_SECONDS
from .dcmi import FakeDcmiBuildError, build_fake_library, set_dcmi_faults
from .products import get_product
from .scenario import scenario_path
from .state import read_state, scenario_time

PRODUCT = "atlas-800i-a2"
MAX_INJECTIONS = 10000
MAX_HOSTS = 1000
MAX_SECONDS = 7 * 86400.0


class CampaignError(ValueError):
    """A bad campaign file: one line naming the file, the injection and the key."""


@dataclass(frozen=True)
class FaultClass:
    name: str
    scenario: str  # the built-in scenario whose fault this is
    device: Optional[int]  # the faulty device in that scenario; None: the fault is the host's
    rules: Tuple[str, ...]  # any of these names the fault
    repair_actions: Tuple[Optional[str], ...]  # what a right finding recommends (None: the rule has none)
    poll: str  # the host config key whose interval bounds how soon the rule can see it ("section.key")
    host_subject: bool = False  # the finding is the host's (a missing card, a job, a source)
    drop: Tuple[str, ...] = ()  # keys of the scenario's override left out (another class's fault)
    chips: int = 1  # how many chips an injection names
    isolates: bool = True  # its chips may rightly go out of service (a job's fault must not take them out)
    # seconds its rule's expression needs the fault's readings to hold before `for:` starts counting (chip-hung
    # compares a minute of memory and process samples: a job that just hung has not been still for a minute)
    steady: float = 0.0
    dcmi_hang: bool = False  # every DCMI call after dcmi_init hangs; its host reads the chips through DCMI


# Every class of issue 33.
CLASSES = {c.name: c for c in (
    FaultClass("overheat", "overheat", 0, ("temperature-critical",), (None,), "poll.table_seconds"),
    FaultClass("hbm-ecc-multibit", "hbm-ecc-fault", 3, ("health-alarm", "ecc-uncorrectable", "driver-fault-repeating",
                                                       "driver-transient-fault"),
               ("inspect_hardware",), "poll.health_seconds"),
    FaultClass("ecc-single-bit-rising", "ecc-rising", 2, ("ecc-single-bit-rising",), (None,), "poll.ecc_seconds",
               drop=("ecc_double_bit_errors", "ecc_double_bit_isolated_pages")),
    FaultClass("roce-link-flap", "link-flap", 1, ("network-link-flapping",), (None,), "network.link_seconds"),
    FaultClass("link-down", "link-down", 5, ("network-link-down", "network-link-down-long"), (None, "inspect_hardware"),
               "network.link_seconds"),
    FaultClass("optical-degraded", "optical-degraded", 3, ("network-optical-out-of-range",), (None,),
               "network.optical_seconds"),
    FaultClass("hccs-lane-degraded", "hccs-degraded", 3, ("hccs-lanes-degraded",), ("inspect_hardware",),
               "poll.hccs_seconds"),
    FaultClass("hung-chip", "hung-chip", 3, ("chip-hung",), ("restart_workload",), "processes.interval_seconds",
               steady=60.0),
    FaultClass("dstate-hang", "dstate-hang", 5, ("chip-dstate",), ("reboot_host",), "processes.interval_seconds"),
    # a chip's driver fault on a chip that shares a job (the campaign hosts' pods hold 4 chips each) waits out the
    # job window before it is the chip's: the same line from the job's other chips would make it the job's
    FaultClass("heartbeat-lost", "heartbeat-lost", 2, ("driver-device-fault", "driver-fault-repeating"),
               ("inspect_hardware", "reset_npu"), "faults.interval_seconds", steady=JOB_WINDOW_SECONDS),
    FaultClass("card-drop", "card-drop", 7, ("chips-missing", "driver-host-device-fault"),
               ("inspect_hardware", "reset_npu"), "poll.table_seconds", host_subject=True),
    FaultClass("job-software-fault", "job-software-fault", 0, ("job-fault",), ("restart_workload",),
               "faults.interval_seconds", host_subject=True, chips=4, isolates=False),
    # npu-smi's values are served until max_age_seconds old; only then is the source down
    FaultClass("npu-smi-hang", "hang", None, ("source-down",), (None,), "max_age_seconds", host_subject=True),
    FaultClass("serving-starved-cpu", "cpu-bottleneck", None, ("cpu-bottleneck",), (None,), "poll.host_seconds",
               host_subject=True),
    # npu-smi answers as on a healthy host. The DCMI source sweeps at the main table's interval and is down once
    # a sweep outlives dcmi.timeout_seconds (its worker killed); the covered npu-smi queries come back meanwhile,
    # so the chips keep their values: the host degrades, no chip goes out of service.
    FaultClass("dcmi-hang", "healthy", None, ("source-down",), (None,), "poll.table_seconds+dcmi.timeout_seconds",
               host_subject=True, isolates=False, dcmi_hang=True),
)}

# The hosts' polls: npumon's defaults where they are a minute or less, faster where a default (ECC 5 min,
# optical 5 min) would make the campaign measure the poll rather than the rule. Driver faults held 2 minutes
# after their last line (default an hour) so that recovery fits in a campaign.
HOST_CONFIG = {
    "poll": {"table_seconds": 15, "usages_seconds": 30, "power_seconds": 60, "health_seconds": 30,
             "ecc_seconds": 30, "board_seconds": 3600, "host_seconds": 15, "hccs_seconds": 30},
    "network": {"link_seconds": 30, "stat_seconds": 30, "optical_seconds": 60, "bandwidth_seconds": 300,
                "config_seconds": 600},
    "faults": {"interval_seconds": 10, "hold_seconds": 120},
    "processes": {"interval_seconds": 30},
    "max_age_seconds": 45,
    "dcmi": {"timeout_seconds": 10.0},  # npumon's default; only the DCMI hosts' configs carry the section
}


def host_extras(name: str, notify_url: Optional[str] = None, dcmi_library: Optional[str] = None) -> Dict[str, Any]:
    """A campaign host's config beyond its polls: HOST_CONFIG's other sections, the Kubernetes hand-off in dry
    run (it sends nothing and needs no cluster; each request it would send is a `handoff_action` event, which is
    when the hand-off happened), given a URL a webhook receiver (the campaign's, campaign_receiver.py) and, given
    the fleet's simulated libdcmi.so, the DCMI backend reading it."""
    extras = {key: value for key, value in HOST_CONFIG.items() if key not in ("poll", "network", "dcmi")}
    extras["handoff"] = {"kubernetes": {"enabled": True, "dry_run": True, "node_name": name, "interval_seconds": 10}}
    if notify_url:
        extras["notify"] = {"receivers": [{"name": "campaign", "type": "webhook", "url": notify_url}]}
    if dcmi_library:
        extras["collect"] = {"backend": "dcmi"}
        extras["dcmi"] = dict(HOST_CONFIG["dcmi"], library=dcmi_library)
    return extras


def dcmi_hosts(campaign: Dict[str, Any]) -> List[int]:
    """The hosts (indices from 1) that read their chips through DCMI: those with a DCMI fault at any time."""
    return sorted({i["host"] for i in campaign["injections"] if CLASSES[i["class"]].dcmi_hang})


def fleet_dcmi_library(campaign: Dict[str, Any], where: str = "campaign",
                       build: Callable[[], str] = build_fake_library) -> Optional[str]:
    """The simulated libdcmi.so the campaign's DCMI hosts load, built once for the fleet (or found in build.py's
    cache) before any host starts; None when no host needs it. One-line CampaignError when it cannot be built."""
    if not dcmi_hosts(campaign):
        return None
    try:
        return build()
    except FakeDcmiBuildError as exc:
        first = min((i for i in campaign["injections"] if CLASSES[i["class"]].dcmi_hang), key=lambda i: i["id"])
        raise CampaignError("{}: injections[{}].class: {} needs the simulated libdcmi.so: {}".format(
            where, first["id"], first["class"], exc)) from None


def poll_seconds(config: Dict[str, Any], key: str) -> float:
    """The interval `section.key` (or top-level `key`) of a host config (HOST_CONFIG's shape); `a+b` adds two
    (a source that sees the fault only after a poll and its deadline)."""
    total = 0.0
    for term in key.split("+"):
        value: Any = config
        for part in term.split("."):
            value = value[part]
        total += float(value)
    return total


# A poll's values become a finding at the end of the pass that reads them, and the switch to the fault lands
# anywhere in the poll's interval: a measured second or two past for: + interval is that, not a slow rule.
PASS_SECONDS = 2.0


def rule_budgets(config: Dict[str, Any] = HOST_CONFIG) -> Dict[str, float]:
    """class -> seconds a finding may take: the shortest `for:` among its rules (the first that can name the
    fault), plus what its expression needs to be steady first, plus one poll of the source that sees it, plus
    the pass (the daemon judges soon after each poll of a judged tier, Tier.judged)."""
    rules = {rule.id: rule for rule in load_rules()[0]}
    return {name: min(rules[rule].for_seconds for rule in fault.rules) + fault.steady
            + poll_seconds(config, fault.poll) + PASS_SECONDS for name, fault in CLASSES.items()}


# ------------------------------------------------------------------------------------------ the file

def host_name(index: int, count: int) -> str:
    return "campaign-{:0{}d}".format(index, max(2, len(str(count))))


def load_campaign(path: str) -> Dict[str, Any]:
    """Read and check a campaign file; one-line CampaignError naming the file and key."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except OSError as exc:
        raise CampaignError("{}: cannot read: {}".format(path, exc.strerror or exc)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise CampaignError("{}{}: not valid YAML".format(path, "" if mark is None else ":{}".format(mark.line + 1))) \
            from None
    return check_campaign(document, path)


def check_campaign(document: Any, where: str = "campaign") -> Dict[str, Any]:
    """The campaign, checked and normalised. Pure."""
    def fail(key: str, problem: str) -> None:
        raise CampaignError("{}: {}: {}".format(where, key, problem))

    def number(value: Any, key: str, low: float, high: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not low <= value <= high:
            fail(key, "expected a number from {:g} to {:g}, got {!r}".format(low, high, value))
        return float(value)

    if not isinstance(document, dict):
        fail("campaign", "expected a mapping with `injections:`")
    unknown = sorted(set(document) - {"description", "hosts", "time_scale", "settle", "injections"})
    if unknown:
        fail(unknown[0], "unknown key (known: description, hosts, time_scale, settle, injections)")
    hosts = int(number(document.get("hosts", 1), "hosts", 1, MAX_HOSTS))
    campaign = {"description": str(document.get("description", "")), "hosts": hosts,
                "time_scale": number(document.get("time_scale", 1.0), "time_scale", 0.1, 100.0),
                "settle": number(document.get("settle", 120.0), "settle", 0.0, MAX_SECONDS)}
    items = document.get("injections")
    if not isinstance(items, list) or not items:
        fail("injections", "expected a non-empty list")
    if len(items) > MAX_INJECTIONS:
        fail("injections", "at most {} injections".format(MAX_INJECTIONS))
    chip_count = len(get_product(PRODUCT).slots())
    injections = []
    for index, item in enumerate(items):
        key = "injections[{}]".format(index)
        if not isinstance(item, dict):
            fail(key, "expected a mapping {host, chip, class, start, duration}")
        extra = sorted(set(item) - {"host", "chip", "chips", "class", "start", "duration"})
        if extra:
            fail(key + "." + extra[0], "unknown key (known: host, chip, chips, class, start, duration)")
        name = item.get("class")
        if name not in CLASSES:
            fail(key + ".class", "unknown class {!r}; known: {}".format(name, ", ".join(sorted(CLASSES))))
        fault = CLASSES[name]
        host = int(number(item.get("host"), key + ".host", 1, hosts))
        if "chip" in item and "chips" in item:
            fail(key, "give chip or chips, not both")
        chips = item.get("chips", [item["chip"]] if "chip" in item else None)
        if fault.device is None:
            if chips is not None:
                fail(key + ".chip", "class {} is the host's: it takes no chip".format(name))
            chips = []
        else:
            if not isinstance(chips, list) or len(chips) != fault.chips:
                fail(key + ".chip" + ("s" if fault.chips > 1 else ""),
                     "class {} takes {} chip(s)".format(name, fault.chips))
            chips = [int(number(chip, key + ".chip", 0, chip_count - 1)) for chip in chips]
            if len(set(chips)) != len(chips):
                fail(key + ".chips", "a chip is named twice")
        start = number(item.get("start"), key + ".start", 0.0, MAX_SECONDS)
        duration = number(item.get("duration"), key + ".duration", 1.0, MAX_SECONDS)
        injections.append({"id": index, "host": host, "chips": chips, "class": name, "start": start,
                           "end": start + duration})
    _check_overlaps(injections, fail)
    campaign["injections"] = sorted(injections, key=lambda i: (i["start"], i["id"]))
    return campaign


def _check_overlaps(injections: Sequence[Dict[str, Any]], fail: Callable[[str, str], None]) -> None:
    """Two injections at once on one chip, or a host-wide one beside anything on its host, would make the ground
    truth ambiguous (which one did the finding find?)."""
    by_host: Dict[int, List[Dict[str, Any]]] = {}
    for injection in injections:
        by_host.setdefault(injection["host"], []).append(injection)
    for host_injections in by_host.values():
        ordered = sorted(host_injections, key=lambda i: i["start"])
        for position, first in enumerate(ordered):
            for second in ordered[position + 1:]:
                if second["start"] >= first["end"]:
                    break
                if not first["chips"] or not second["chips"] or set(first["chips"]) & set(second["chips"]):
                    fail("injections[{}]".format(second["id"]), "overlaps injections[{}] on host {}{}".format(
                        first["id"], first["host"], "" if not first["chips"] or not second["chips"]
                        else " chip {}".format(sorted(set(first["chips"]) & set(second["chips"]))[0])))


# ------------------------------------------------------------------------------------------ composing

def _raw_scenario(name: str) -> Dict[str, Any]:
    with open(scenario_path(name), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def shift(expression: Any, t0: float) -> Any:
    """A value expression (values.py) that does at scenario time t0 + t what `expression` does at t: ramps
    start at t0, steps are moved by t0; constants and wobbles are left alone. Pure."""
    if isinstance(expression, list):
        return [shift(item, t0) for item in expression]
    if not isinstance(expression, dict):
        return expression
    if "steps" in expression:
        return dict(expression, steps={float(at) + t0: value for at, value in expression["steps"].items()})
    if expression.get("per_minute"):
        return dict(expression, start=float(expression.get("start", 0.0)) - float(expression["per_minute"]) * t0 / 60.0)
    return expression


def fault_fragment(fault: FaultClass, scenario: Dict[str, Any], chips: Sequence[int], t0: float,
                   duration: float) -> Dict[str, Any]:
    """What one injection adds to a healthy host: {overrides, kmsg, top, default}. Pure."""
    fragment: Dict[str, Any] = {"overrides": [], "kmsg": [], "top": {}, "default": {}}
    source = [fault.device + offset for offset in range(fault.chips)] if fault.device is not None else []
    moved = dict(zip(source, chips))
    for override in (scenario.get("chips") or {}).get("overrides") or []:
        for device in override["devices"]:
            if device in moved:
                values = {key: shift(value, t0) for key, value in override.items()
                          if key != "devices" and key not in fault.drop}
                fragment["overrides"].append(dict(values, devices=[moved[device]]))
    for entry in scenario.get("kmsg") or []:
        devices = [moved[device] for device in entry["devices"] if device in moved]
        if devices:
            every = float(entry.get("every", 0.0))
            count = int(entry.get("count", 1))
            if every:  # no line after the injection's end
                count = max(1, min(count, int(duration // every) + 1))
            fragment["kmsg"].append(dict(entry, devices=devices, at=float(entry.get("at", 0.0)) + t0, count=count))
    if fault.device is None:
        fragment["top"] = {key: shift(scenario[key], t0) for key in ("behaviour", "serving_queue_depth", "host")
                           if key in scenario}
        fragment["default"] = {key: shift(value, t0)
                               for key, value in ((scenario.get("chips") or {}).get("default") or {}).items()}
    return fragment


def compose(base: Dict[str, Any], fragments: Sequence[Dict[str, Any]], description: str) -> Dict[str, Any]:
    """The scenario of a host with these injections running: the healthy `base` plus each fragment. Pure."""
    scenario = copy.deepcopy(base)
    scenario["description"] = description
    chips = scenario.setdefault("chips", {})
    default = chips.setdefault("default", {})
    overrides = list(chips.get("overrides") or [])
    kmsg = list(scenario.get("kmsg") or [])
    for fragment in fragments:
        default.update(fragment["default"])
        overrides.extend(fragment["overrides"])
        kmsg.extend(fragment["kmsg"])
        scenario.update(fragment["top"])
    if overrides:
        chips["overrides"] = overrides
    if kmsg:
        scenario["kmsg"] = kmsg
    return scenario


# ------------------------------------------------------------------------------------------ the run

def chip_subjects(injection: Dict[str, Any]) -> List[str]:
    """The injection's chips as findings name them (npuN/chipC)."""
    slots = {slot.device_id: slot for slot in get_product(PRODUCT).slots()}
    return [chip_subject(slots[chip].npu, slots[chip].chip) for chip in injection["chips"]]


def subjects(injection: Dict[str, Any]) -> List[str]:
    """Where the findings of an injection should be: its chips or the host."""
    return ["host"] if CLASSES[injection["class"]].host_subject else chip_subjects(injection)


class CampaignPlayer:
    """Plays a checked campaign on running simulated hosts: `switch(host index, scenario path)` is how a host
    changes scenario (simulation.set_scenario on its state), `sim_dir(host index)` where its simulation lives,
    `dcmi_faults(host index, hang)` how a DCMI host's library starts or stops hanging (default: set_dcmi_faults
    on its simulation). The clock and sleep are parameters so that tests can run it on a fake clock."""

    def __init__(self, campaign: Dict[str, Any], names: Sequence[str], scenario_dir: str,
                 sim_dir: Callable[[int], str], switch: Callable[[int, str], Any], truth_path: str,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 dcmi_faults: Optional[Callable[[int, bool], Any]] = None):
        self.campaign = campaign
        self.names = list(names)
        self.scenario_dir = scenario_dir
        self.sim_dir = sim_dir
        self.switch = switch
        self.dcmi_faults = dcmi_faults or self._set_dcmi_faults
        self.dcmi_hosts = set(dcmi_hosts(campaign))
        self.truth_path = truth_path
        self.clock = clock
        self.sleep = sleep
        self.budgets = rule_budgets()
        self.base = _raw_scenario("healthy")
        self.base.pop("description", None)
        self._raw: Dict[str, Dict[str, Any]] = {}
        self._fragments: Dict[int, Dict[str, Any]] = {}  # injection id -> its fragment, from its start on
        self._added = 0  # kernel-log entries added so far, in the order they were added

    def scenario_file(self, host: int) -> str:
        # One file per host for the whole campaign: the simulated kernel log counts the lines it wrote per
        # scenario name and entry, so the name stays and entries are only ever added (see _fragment).
        return os.path.join(self.scenario_dir, self.names[host - 1] + ".yaml")

    def write_healthy(self) -> None:
        os.makedirs(self.scenario_dir, exist_ok=True)
        for host in range(1, len(self.names) + 1):
            self._write(host, [])

    def _write(self, host: int, running: Sequence[Dict[str, Any]]) -> str:
        names = ", ".join(i["class"] for i in running) or "healthy"
        fragments = [self._fragments[i["id"]] for i in running]
        # Kernel-log lines of ended injections stay (all written already): keeps every entry's index.
        kmsg_only = [dict(self._fragments[i], overrides=[], top={}, default={}) for i in sorted(self._fragments)
                     if i not in {r["id"] for r in running} and self._fragments[i]["host"] == host]
        path = self.scenario_file(host)
        document = compose(self.base, kmsg_only + fragments, "campaign host: " + names)
        kmsg = sorted(document.pop("kmsg", []), key=lambda entry: entry["_order"])
        if kmsg:
            document["kmsg"] = [{k: v for k, v in entry.items() if k != "_order"} for entry in kmsg]
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            yaml.safe_dump(document, handle, sort_keys=False)
        os.replace(path + ".tmp", path)
        return path

    def _fragment(self, injection: Dict[str, Any], t0: float) -> Dict[str, Any]:
        fault = CLASSES[injection["class"]]
        if fault.scenario not in self._raw:
            self._raw[fault.scenario] = _raw_scenario(fault.scenario)
        fragment = fault_fragment(fault, self._raw[fault.scenario], injection["chips"], t0,
                                  (injection["end"] - injection["start"]))
        for entry in fragment["kmsg"]:
            entry["_order"] = self._added  # the order entries were added in, kept for good
            self._added += 1
        fragment["host"] = injection["host"]
        return fragment

    def _set_dcmi_faults(self, host: int, hang: bool) -> None:
        # "*": every call but dcmi_init, as the `hang` behaviour does; a hung call is cut by the worker's deadline
        set_dcmi_faults(self.sim_dir(host), hang=["*"] if hang else [])

    def _record(self, line: Dict[str, Any]) -> None:
        with open(self.truth_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, sort_keys=True) + "\n")

    def play(self) -> float:
        """Play the whole campaign, settle included; returns the wall time it ended."""
        scale = self.campaign["time_scale"]
        started = self.clock()
        self._record({"type": "campaign", "hosts": self.names, "time_scale": scale, "start": started,
                      "description": self.campaign["description"],
                      "dcmi_hosts": [self.names[host - 1] for host in sorted(self.dcmi_hosts)]})
        moments = sorted({i["start"] for i in self.campaign["injections"]} |
                         {i["end"] for i in self.campaign["injections"]})
        running: Dict[int, Dict[str, Any]] = {}
        for moment in moments:
            self._sleep_until(started + moment / scale)
            changed = set()
            for injection in self.campaign["injections"]:
                if injection["end"] == moment and injection["id"] in running:
                    del running[injection["id"]]
                    changed.add(injection["host"])
                elif injection["start"] == moment:
                    t0 = scenario_time(read_state(self.sim_dir(injection["host"])), self.clock())
                    self._fragments[injection["id"]] = self._fragment(injection, t0)
                    running[injection["id"]] = injection
                    changed.add(injection["host"])
                    self._record(self._truth(injection, started, t0))
            for host in sorted(changed):
                on_host = [i for i in running.values() if i["host"] == host]
                if host in self.dcmi_hosts:  # before the switch, which rewrites the library's state with them
                    self.dcmi_faults(host, any(CLASSES[i["class"]].dcmi_hang for i in on_host))
                self.switch(host, self._write(host, on_host))
        last = moments[-1] if moments else 0.0
        self._sleep_until(started + (last + self.campaign["settle"]) / scale)
        ended = self.clock()
        self._record({"type": "end", "time": ended})
        return ended

    def _truth(self, injection: Dict[str, Any], started: float, t0: float) -> Dict[str, Any]:
        scale = self.campaign["time_scale"]
        fault = CLASSES[injection["class"]]
        duration = injection["end"] - injection["start"]
        return {"type": "injection", "id": injection["id"], "host": self.names[injection["host"] - 1],
                "chips": injection["chips"], "subjects": subjects(injection), "chip_subjects": chip_subjects(injection),
                "isolates": fault.isolates, "class": injection["class"],
                "scenario": fault.scenario, "start": started + injection["start"] / scale,
                "end": started + injection["end"] / scale, "start_sim": t0, "end_sim": t0 + duration,
                "expect": {"rules": list(fault.rules), "repair_actions": list(fault.repair_actions),
                           "budget_seconds": self.budgets[fault.name]}}

    def _sleep_until(self, when: float) -> None:
        while True:
            left = when - self.clock()
            if left <= 0:
                return
            self.sleep(min(left, 1.0))


def read_truth(path: str) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """(the campaign line, the injection lines) of a ground-truth file."""
    header: Dict[str, Any] = {}
    injections = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record["type"] == "campaign":
                header = record
            elif record["type"] == "injection":
                injections.append(record)
    return header, injections


def host_events(name: str, state_dir: str) -> List[Dict[str, Any]]:
    """A host's finding, verdict and hand-off events from its event history, as the scorer reads them (shadow
    findings left out: they decide nothing)."""
    path = events_path(state_dir)
    if not os.path.exists(path):
        return []
    store = EventStore(path, readonly=True)
    try:
        events = store.query(kinds=("finding_fired", "finding_resolved", "verdict_changed", "handoff_action"))
    except EventStoreError:
        return []
    finally:
        store.close()
    result = []
    for event in events:
        details = event.details or {}
        if details.get("shadow"):
            continue
        result.append({"host": name, "time": event.time, "kind": event.kind, "subject": event.subject,
                       "rule": details.get("rule"), "repair_action": details.get("repair_action"),
                       "new": details.get("new")})
    return result
