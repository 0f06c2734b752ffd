"""The one vocabulary every part of npumon speaks: Snapshot, ChipSample, HostSample, Finding.

Sources fill these in; the exporter, the rules, the notifier and `npumon check` only read them.
Units are base units throughout (bytes, watts, celsius, seconds, ratios 0..1); `None` means the
hardware or the tool did not report a value.
"""

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

MIB = 1048576  # npu-smi's "MB" are MiB

HEALTH_STATES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
SEVERITIES = ("info", "warning", "critical")
STATUSES = ("ok", "warning", "critical", "unknown")

_CHIP_SUBJECT = re.compile(r"npu(\d+)/chip(\d+)")


def chip_subject(npu: int, chip: int) -> str:
    """The subject of a chip's findings, events and alerts: "npu<N>/chip<C>" (the other subject is "host")."""
    return "npu{}/chip{}".format(npu, chip)


def parse_chip_subject(subject: str) -> Optional[Tuple[int, int]]:
    """(npu, chip) of a chip subject; None for "host" or anything else."""
    match = _CHIP_SUBJECT.fullmatch(subject)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


@dataclass
class ProcessSample:
    npu: int
    chip: Optional[int]
    pid: int
    name: Optional[str]
    memory_bytes: Optional[int]
    container_pid: Optional[int] = None


@dataclass
class ChipSample:
    """One chip (die) as npu-smi numbers it: `npu` is the card id, `chip` the index in the card."""

    npu: int
    chip: int
    name: Optional[str] = None
    health: Optional[str] = None
    bus_id: Optional[str] = None
    device_id: Optional[int] = None  # logical id = /dev/davinciN ("Chip Logic ID" of `npu-smi info -m`)
    phy_id: Optional[int] = None  # physical id where npu-smi prints one (A3 Phy-ID)
    # the chip's die id as npu-exporter formats it ("XXXXXXXX-XXXXXXXX-XXXXXXXX-XXXXXXXX-XXXXXXXX"), from
    # `-t board -i N -c C` VDie ID (310P: Die ID)
    vdie_id: Optional[str] = None
    model_name: Optional[str] = None  # "<Chip Name>-<Chip Type>-<Chip Version>", e.g. "910B3-Ascend-V1"
    temperature_celsius: Optional[float] = None
    power_watts: Optional[float] = None
    aicore_ratio: Optional[float] = None
    aivector_ratio: Optional[float] = None
    aicpu_ratio: Optional[float] = None
    ctrlcpu_ratio: Optional[float] = None
    aicube_ratio: Optional[float] = None
    vectorcore_ratio: Optional[float] = None
    npu_util_ratio: Optional[float] = None
    hbm_bandwidth_ratio: Optional[float] = None
    ddr_bandwidth_ratio: Optional[float] = None
    memory_used_bytes: Optional[int] = None
    memory_total_bytes: Optional[int] = None
    hbm_used_bytes: Optional[int] = None
    hbm_total_bytes: Optional[int] = None
    hbm_usage_ratio: Optional[float] = None  # `-t usages` HBM Usage Rate, 0..1
    hbm_temperature_celsius: Optional[float] = None  # `-t memory`
    aicore_freq_mhz: Optional[float] = None  # `-t common` Aicore curFreq
    voltage_volts: Optional[float] = None  # `-t volt`
    card_power_watts: Optional[float] = None  # 310P: the whole card's power, printed by its MCU (`-t common`)
    serial_number: Optional[str] = None  # the card's, from `-t board -i N`
    hugepages_used: Optional[int] = None
    hugepages_total: Optional[int] = None
    ecc_single_bit_errors: Optional[int] = None
    ecc_double_bit_errors: Optional[int] = None
    ecc_isolated_pages: Optional[int] = None
    # per memory ("hbm", "ddr") -> {"single": n, "double": n, "isolated_pages": n}
    ecc: Optional[Dict[str, Dict[str, Optional[int]]]] = None
    # per memory -> npu-smi's own counters as printed: "aggregate_single", "aggregate_double" (lifetime totals),
    # "isolated_single", "isolated_double" (pages)
    ecc_counters: Optional[Dict[str, Dict[str, Optional[int]]]] = None
    error_codes: List[str] = field(default_factory=list)
    error_information: List[str] = field(default_factory=list)
    firmware_version: Optional[str] = None
    driver_version: Optional[str] = None
    compatibility: Optional[str] = None
    processes: List[ProcessSample] = field(default_factory=list)
    pcie: Optional["PcieLink"] = None
    numa_node: Optional[int] = None  # NUMA node of the chip's PCIe device (sysfs numa_node), if known
    # The chip's interconnect links (sources/npusmi/links.py, DCMI alike), where the product has them:
    # HCCS (910B, A3): {"health": "OK"|"NOK", "first_error_lane", "links": [{"link", "lane_mode", "lanes",
    # "speed_gbps", "tx_packets", "rx_packets", "retries", "crc_errors"}]}
    hccs: Optional[Dict[str, Any]] = None
    # HCCS bandwidth over a short profiling window, GB/s: {"links": [{"link", "tx_gbps", "rx_gbps"}],
    # "total_tx_gbps", "total_rx_gbps"}
    hccs_bandwidth: Optional[Dict[str, Any]] = None
    sio: Optional[Dict[str, Any]] = None  # A3 die-to-die link: {"tx_errors", "rx_errors"} CRC error counts
    # The 950's UB ports (DCMI only: sources/dcmi/read.py read_ub): {"link_status": "linked"|"partial"|"no_link"|
    # "not_needed", "ports": [{"udie", "port", "status": "full"|"partial_lanes"|"down", "counters": {npu-exporter's
    # counter name: count since the driver loaded} or None}]}
    ub: Optional[Dict[str, Any]] = None
    # their traffic over a 100 ms window, MB/s: {"ports": [{"udie", "port", "tx_mbps", "rx_mbps"}]} (linked ports)
    ub_bandwidth: Optional[Dict[str, Any]] = None
    probe: Optional["ProbeSample"] = None  # the latest liveness probe (npumon.sources.probe), while fresh
    # A source's own values that have no field here, by name (its SourceSpec declares their facts and
    # metrics); `check --json` shows them as keys of the chip.
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def key(self):
        return (self.npu, self.chip)

    @property
    def subject(self) -> str:
        return chip_subject(self.npu, self.chip)

    def update(self, values: Dict[str, Any]) -> None:
        """Merge a parser's `{field: value}` dict, before the sample is published; unknown fields are a
        programming error."""
        for name, value in values.items():
            if name not in CHIP_VALUE_FIELDS:
                raise KeyError("unknown chip field {!r}".format(name))
            setattr(self, name, value)


# The fields a parser may fill in (everything but the chip's identity), so merging a result is a plain update.
CHIP_VALUE_FIELDS = tuple(f.name for f in dataclasses.fields(ChipSample) if f.name not in ("npu", "chip"))


@dataclass
class PcieLink:
    current_speed_gts: Optional[float] = None
    max_speed_gts: Optional[float] = None
    current_width: Optional[int] = None
    max_width: Optional[int] = None

    @property
    def degraded(self) -> Optional[bool]:
        pairs = ((self.current_speed_gts, self.max_speed_gts), (self.current_width, self.max_width))
        known = [(cur, top) for cur, top in pairs if cur is not None and top is not None]
        if not known:
            return None
        return any(cur < top for cur, top in known)


PROBE_STATES = ("ok", "failed", "unavailable", "skipped")


@dataclass(frozen=True)
class ProbeSample:
    """A chip's latest liveness probe (npumon.sources.probe): it passed, it failed, the probe cannot run on this
    host (unavailable), or the chip was not probed this time (skipped: busy, no logical id, ...)."""

    state: str  # one of PROBE_STATES
    time: float  # unix time the probe started (or was skipped)
    kind: Optional[str] = None  # "acl" or "torch"
    device_id: Optional[int] = None  # the logical device id the probe opened
    first_run: Optional[bool] = None  # the chip's first probe since npumon started: the runtime was cold
    duration_seconds: Optional[float] = None  # sum of the stage latencies
    baseline_seconds: Optional[float] = None  # median duration of the chip's recent warm successful probes
    stage_seconds: Dict[str, float] = field(default_factory=dict)  # stage -> latency, in the order they ran
    failed_stage: Optional[str] = None
    error_code: Optional[int] = None  # the ACL error code, when the failure had one
    error_name: Optional[str] = None  # e.g. "ACL_ERROR_RT_DEVICE_MEM_ERROR"
    detail: Optional[str] = None  # what failed, or why the probe did not run
    action: Optional[str] = None  # what an operator should do about a failure


@dataclass
class NumaNode:
    node: int
    cpus: List[int] = field(default_factory=list)
    cpu_ratio: Optional[float] = None
    memory_total_bytes: Optional[int] = None
    memory_free_bytes: Optional[int] = None


@dataclass
class DeviceFile:
    path: str
    exists: bool
    accessible: bool  # readable and writable by this process; as root, by a user other than root (by_mode)
    mode: Optional[str] = None  # e.g. "crw-rw----"
    owner: Optional[str] = None
    group: Optional[str] = None
    by_mode: bool = False  # judged from the mode bits: root opens any file, so its own access says nothing


@dataclass
class HostSample:
    hostname: str = ""
    cpu_ratio: Optional[float] = None
    cpu_count: Optional[int] = None
    load1: Optional[float] = None
    memory_total_bytes: Optional[int] = None
    memory_available_bytes: Optional[int] = None
    numa_nodes: List[NumaNode] = field(default_factory=list)
    numa_balancing: Optional[int] = None
    max_map_count: Optional[int] = None
    driver_version: Optional[str] = None
    firmware_version: Optional[str] = None
    cann_version: Optional[str] = None
    # compatible ranges read from the version files, e.g. "[7.0.0,7.2.99]"
    driver_compatible_firmware: Optional[str] = None
    firmware_compatible_driver: Optional[str] = None
    device_files: List[DeviceFile] = field(default_factory=list)
    serving_queue_depth: Optional[float] = None
    ambient_temperature_celsius: Optional[float] = None  # hottest inlet/board sensor (control.ambient.sensor)
    extra: Dict[str, Any] = field(default_factory=dict)  # a source's own values by name, as on ChipSample


NOT_POLLED = "not polled yet"  # what a source reports before its first poll


@dataclass
class SourceStatus:
    ok: bool
    error: Optional[str] = None
    duration_seconds: Optional[float] = None
    last_success: Optional[float] = None  # unix time
    unsupported: bool = False  # the product does not support this query at all
    left_out: int = 0  # calls its last poll did not make for lack of time or a free slot (asked first next time)
    # waiting for this other source (hccn for npu-smi's chips, npu-smi's queries for its table), within its grace:
    # not down itself (the other source's status says what is wrong, if anything)
    waiting_on: Optional[str] = None
    degraded: bool = False  # up, but part of its answer was unreadable and left out (error says what)
    backend: Optional[str] = None  # what reads the chip values ("dcmi" or "npu-smi"), on the sources that do
    fallback_reason: Optional[str] = None  # collect.backend auto on npu-smi: why not DCMI

    @property
    def not_polled_yet(self) -> bool:
        return not self.ok and self.last_success is None and self.error == NOT_POLLED

    @property
    def failing(self) -> bool:
        """Down for real, as the journal logs it and the source-down rule counts it: not ok, not unsupported on
        this host, not merely waiting for its first poll, and not waiting for another source."""
        return not self.ok and not self.unsupported and not self.not_polled_yet and self.waiting_on is None

    def to_json(self) -> Dict[str, Any]:
        return {
            "ok": self.ok,
            "error": self.error,
            "duration_seconds": None if self.duration_seconds is None else round(self.duration_seconds, 4),
            "last_success": self.last_success,
            "unsupported": self.unsupported,
            "left_out": self.left_out,
            "waiting_on": self.waiting_on,
            "degraded": self.degraded,
            **({} if self.backend is None else {"backend": self.backend}),
            **({} if self.fallback_reason is None else {"fallback_reason": self.fallback_reason}),
        }


@dataclass
class Snapshot:
    time: float  # unix time the snapshot was assembled
    host: HostSample
    chips: List[ChipSample]
    sources: Dict[str, SourceStatus]
    tool_version: Optional[str] = None
    driver_version: Optional[str] = None  # as the npu-smi title line prints it

    def chip(self, npu: int, chip: int) -> Optional[ChipSample]:
        for sample in self.chips:
            if sample.npu == npu and sample.chip == chip:
                return sample
        return None


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # info | warning | critical
    subject: str  # "host" or "npu<N>/chip<C>"
    summary: str
    hint: str
    since: float  # unix time the condition started to hold
    labels: Dict[str, str] = field(default_factory=dict)
    shadow: bool = False  # recorded, never notified
    # For driver faults (npumon/faults): what repairs it (one of faults.levels.REPAIR_ACTIONS) and the fault
    # code's handling level; None where not known, and then left out of the JSON.
    repair_action: Optional[str] = None
    level: Optional[str] = None
    # A host-wide cause reported once (a rule with `group: host`): the chips it affects; None otherwise.
    chips: Optional[List[str]] = None

    def to_json(self) -> Dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in OPTIONAL_FINDING_KEYS:
            if data[key] is None:
                del data[key]
        return data


# left out of the JSON when None; repair_action is not among them: the contract gives it as null where a rule
# has none, so a consumer can tell "no action" from an older npumon that never said
OPTIONAL_FINDING_KEYS = ("level", "chips")


def chip_json(chip: ChipSample) -> Dict[str, Any]:
    """The `check --json` / `/status` form of a chip (contract keys first, then extras)."""
    data = dataclasses.asdict(chip)
    data["pcie"] = None if chip.pcie is None else dict(dataclasses.asdict(chip.pcie), degraded=chip.pcie.degraded)
    data.update(data.pop("extra"))
    return data
