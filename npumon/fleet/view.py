"""The fleet as rows: one per host, chip and active finding, built from the fleet-wide query results and
ordered worst first. Pure: reading Prometheus is in read.py, printing in render.py.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..model import chip_subject, parse_chip_subject
from .client import Labels, Sample
from .series import chip_key, host_of

# Worst first. A host that is down ranks after critical ones: a critical finding is a known fault,
# a down host may only be a network blip; both come before warnings.
HOST_STATUS_ORDER = ("critical", "down", "warning", "info", "ok")
HEALTH_ORDER = ("Critical", "Alarm", "UNKNOWN", "Warning", "OK")
SORT_KEYS = ("status", "host", "temperature", "findings", "chips")


@dataclass
class FindingRow:
    host: str
    rule: str
    severity: str
    subject: str
    summary: str = ""
    hint: str = ""


@dataclass
class ChipRow:
    host: str
    npu: int
    chip: int
    name: Optional[str] = None
    health: Optional[str] = None
    temperature_celsius: Optional[float] = None
    power_watts: Optional[float] = None
    aicore_ratio: Optional[float] = None
    ecc_double_bit_errors: Optional[float] = None
    ecc_isolated_pages: Optional[float] = None
    worst_finding: Optional[str] = None  # severity of the chip's worst active finding

    @property
    def subject(self) -> str:
        return chip_subject(self.npu, self.chip)


@dataclass
class HostRow:
    host: str
    instances: List[str] = field(default_factory=list)
    up: Optional[bool] = None  # None: Prometheus has no `up` for it (e.g. series from another job)
    chips: int = 0
    unhealthy_chips: int = 0
    hottest_celsius: Optional[float] = None
    findings: Dict[str, int] = field(default_factory=dict)  # severity -> count
    sources_down: List[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.up is False:
            return "down"
        for severity in ("critical", "warning", "info"):
            if self.findings.get(severity):
                return severity
        return "ok"


@dataclass
class FleetView:
    prometheus: str
    jobs: List[str]
    time: float
    hosts: List[HostRow]
    chips: List[ChipRow]
    findings: List[FindingRow]


def build_view(prometheus: str, jobs: Sequence[str], now: float, results: Dict[str, List[Sample]],
               findings: List[FindingRow], host_label: str) -> FleetView:
    """The view from the fleet-wide query results (see read.FLEET_QUERIES) and the rendered findings."""
    hosts: Dict[str, HostRow] = {}

    def host(name: str) -> HostRow:
        if name not in hosts:
            hosts[name] = HostRow(name)
        return hosts[name]

    for labels, value in results["up"]:
        row = host(host_of(labels, host_label))
        instance = labels.get("instance", "")
        if instance and instance not in row.instances:
            row.instances.append(instance)
        row.up = bool(value) if row.up is None else (row.up and bool(value))
    chips: Dict[Tuple[str, int, int], ChipRow] = {}

    def chip(labels: Labels) -> Optional[ChipRow]:
        key = chip_key(labels)
        if key is None:
            return None
        name = host_of(labels, host_label)
        host(name)
        if (name,) + key not in chips:
            chips[(name,) + key] = ChipRow(name, key[0], key[1])
        return chips[(name,) + key]

    for labels, _ in results["chip_info"]:
        row = chip(labels)
        if row is not None:
            row.name = labels.get("name") or None
    for labels, _ in results["health"]:
        row = chip(labels)
        if row is not None:
            row.health = labels.get("state")
    for metric, attribute in (("temperature", "temperature_celsius"), ("power", "power_watts"),
                              ("aicore", "aicore_ratio"), ("ecc_double", "ecc_double_bit_errors"),
                              ("isolated_pages", "ecc_isolated_pages")):
        for labels, value in results[metric]:
            row = chip(labels)
            if row is not None:
                setattr(row, attribute, value)
    for labels, _ in results["sources_down"]:
        row = host(host_of(labels, host_label))
        row.sources_down = sorted(set(row.sources_down) | {labels.get("source", "?")})
    for finding in findings:
        row = host(finding.host)
        row.findings[finding.severity] = row.findings.get(finding.severity, 0) + 1
        key = parse_chip_subject(finding.subject)
        chip_row = chips.get((finding.host,) + key) if key is not None else None
        if chip_row is not None and _severity_rank(finding.severity) < _severity_rank(chip_row.worst_finding):
            chip_row.worst_finding = finding.severity
    for row in chips.values():
        owner = hosts[row.host]
        owner.chips += 1
        if row.health is not None and row.health != "OK":
            owner.unhealthy_chips += 1
        if row.temperature_celsius is not None and (owner.hottest_celsius is None
                                                    or row.temperature_celsius > owner.hottest_celsius):
            owner.hottest_celsius = row.temperature_celsius
    return FleetView(prometheus, list(jobs), now, list(hosts.values()), list(chips.values()), findings)


def _severity_rank(severity: Optional[str]) -> int:
    order = ("critical", "warning", "info")
    return order.index(severity) if severity in order else len(order)


def _health_rank(health: Optional[str]) -> int:
    return HEALTH_ORDER.index(health) if health in HEALTH_ORDER else len(HEALTH_ORDER)


def _descending(value: Optional[float]) -> float:
    return -value if value is not None else math.inf


def sorted_hosts(hosts: Iterable[HostRow], sort: str = "status") -> List[HostRow]:
    def worst_first(row: HostRow):
        return (HOST_STATUS_ORDER.index(row.status), -row.findings.get("critical", 0),
                -row.findings.get("warning", 0), -row.unhealthy_chips, _descending(row.hottest_celsius), row.host)

    keys: Dict[str, Callable[[HostRow], Any]] = {
        "status": worst_first,
        "host": lambda row: row.host,
        "temperature": lambda row: (_descending(row.hottest_celsius), worst_first(row)),
        "findings": lambda row: (-sum(row.findings.values()), worst_first(row)),
        "chips": lambda row: (-row.chips, worst_first(row)),
    }
    return sorted(hosts, key=keys[sort])


def worst_chips(chips: Iterable[ChipRow], top: int, sort: str = "status") -> List[ChipRow]:
    """The chips that most need a look: bad health, then findings, then heat; by heat alone with
    --sort temperature. Healthy chips without findings count only for heat."""
    def badness(row: ChipRow):
        return (_health_rank(row.health), _severity_rank(row.worst_finding), _descending(row.temperature_celsius),
                row.host, row.npu, row.chip)

    if sort == "temperature":
        key = lambda row: (_descending(row.temperature_celsius),) + badness(row)  # noqa: E731
    else:
        key = badness
    return sorted(chips, key=key)[:max(0, top)]


def sorted_findings(findings: Iterable[FindingRow], hosts: Sequence[HostRow]) -> List[FindingRow]:
    """In the order of the host list, worst severity first within a host."""
    position = {row.host: i for i, row in enumerate(hosts)}
    return sorted(findings, key=lambda f: (position.get(f.host, len(position)), _severity_rank(f.severity),
                                           f.subject, f.rule))
