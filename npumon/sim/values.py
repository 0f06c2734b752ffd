"""Scenario values over time: the small value language and the chip/host values it yields at time t.

Pure functions on plain (JSON-shaped) data, so the simulator executable can evaluate a scenario that
`scenario.py` validated earlier without importing YAML. A value is one of:

* a constant: `52`, `"OK"`;
* a ramp with an optional wobble and caps: `{start: 86, per_minute: 0.5, max: 98}`,
  `{start: 50, wobble: 4, period_seconds: 120}` -> start + per_minute * t / 60 + wobble * sin(...),
  clamped to [min, max];
* steps: `{steps: [[0, "OK"], [300, "Alarm"]]}` -> the value of the last step whose time <= t.

The wobble is a sine whose phase depends on the chip's logical id, so chips differ but every call at the
same scenario time prints the same numbers.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

UINT32_MAX = 4294967295  # npu-smi's ECC counters saturate here

NUMBER = "number"
TEXT = "text"
ERRORS = "errors"
PROCESSES = "processes"
PROBE = "probe"
DIAG = "diag"

# Every per-chip value a scenario may set: name -> (kind, default). A default of None means "follows
# another value" (see _FOLLOWS) or, for aicore_freq_mhz, the product's rated frequency.
CHIP_FIELDS: Dict[str, Tuple[str, Any]] = {
    "health": (TEXT, "OK"),
    "compatibility": (TEXT, "OK"),  # what `-t board` prints for the card; read from the card's chip 0
    "errors": (ERRORS, []),  # [{code: "A4025021", information: "..."}]; what `-t health -c` prints
    "temperature_celsius": (NUMBER, 48),
    "hbm_temperature_celsius": (NUMBER, None),
    "board_temperature_celsius": (NUMBER, 36),  # the card's MCU / board sensors; read from the card's chip 0
    "power_watts": (NUMBER, 95.0),
    "aicore_percent": (NUMBER, 45),
    "aivector_percent": (NUMBER, 30),
    "aicube_percent": (NUMBER, 40),
    "npu_utilization_percent": (NUMBER, None),
    "aicpu_percent": (NUMBER, 2),
    "ctrlcpu_percent": (NUMBER, 6),
    "vectorcore_percent": (NUMBER, 0),
    "dvpp_percent": (NUMBER, 0),
    "memory_used_percent": (NUMBER, 85),  # of HBM on the 910 family, of DDR on the 310 family
    "ddr_used_percent": (NUMBER, 30),  # of the 910 A1's DDR, the one 910 with DDR of its own (~30 % in captures)
    "hbm_bandwidth_percent": (NUMBER, 25),
    "ddr_bandwidth_percent": (NUMBER, 10),
    "aicore_freq_mhz": (NUMBER, None),
    "hugepages_total": (NUMBER, 0),
    "hugepages_used": (NUMBER, 0),
    "ecc_single_bit_errors": (NUMBER, 0),
    "ecc_double_bit_errors": (NUMBER, 0),
    "ecc_single_bit_isolated_pages": (NUMBER, 0),
    "ecc_double_bit_isolated_pages": (NUMBER, 0),
    # [{name: python, memory_mb: 30000 or memory_percent: 80 (of the chip's memory), pid: 4242 (optional),
    #   cpu_percent: 85 (of one CPU, optional), state: S (R, S or D in /proc/<pid>/stat, optional)}]
    "processes": (PROCESSES, []),
    # what the simulated pyACL does on this chip's probe (sim/pyacl.py): {} works;
    # {fail: rt.memcpy, error_code: 507053}, {hang: <call>}, {corrupt: rt.memcpy}, {device_status: abnormal},
    # {slow: <call>, delay_seconds: <value over time>}
    "probe": (PROBE, {}),
    # what the simulated device does under `npumon diag` levels 2 and 3 (sim/diag_acl.py): {} works
    "diag": (DIAG, {}),
    # the chip's RoCE port as the simulated hccn_tool (sim/hccn.py) reports it; 310-family products have none
    "network_link": (TEXT, "UP"),
    # how long a link DOWN at scenario time 0 had been down then (0: it went down at most a minute before)
    "network_link_down_for_seconds": (NUMBER, 0),
    "network_link_flaps_per_hour": (NUMBER, 0),  # link down/up pairs in the link history, at this rate
    "network_health": (TEXT, "Success"),
    "network_speed_mbps": (NUMBER, 200000),
    "network_optical": (TEXT, "ok"),  # ok | degraded (RX power below the module's threshold) | absent | unsupported
    "network_roce_errors_per_minute": (NUMBER, 0),
    "network_roce_packets_per_second": (NUMBER, 50000),  # a constant: RoCE packets sent and received
    "network_pause_frames_per_second": (NUMBER, 0),  # PFC pause frames received (priority 3) and sent
    "network_ip": (TEXT, "set"),  # set | none
    "network_gateway": (TEXT, "set"),
    "network_hccn": (TEXT, "answers"),  # answers | blocks (a chip that is not ready: hccn_tool waits 300 s)
    # The chip's HCCS links (910B, A3; sim/links.py): every link carries hccs_traffic_gbps each way and is
    # healthy, except link hccs_degraded_link (0: none), which trained at hccs_degraded_lanes lanes (4, 2, 1, 0)
    # and counts the CRC errors and retries (counters: use a ramp to make them rise)
    "hccs_health": (TEXT, "OK"),
    "hccs_traffic_gbps": (NUMBER, 0),
    "hccs_degraded_link": (NUMBER, 0),
    "hccs_degraded_lanes": (NUMBER, 4),
    "hccs_crc_errors": (NUMBER, 0),
    "hccs_retries": (NUMBER, 0),
    # the A3's die-to-die SIO link: CRC error counts (u16 in DCMI)
    "sio_tx_crc_errors": (NUMBER, 0),
    "sio_rx_crc_errors": (NUMBER, 0),
    # The 950's UB ports 4-6 (sim/dcmi/fake_dcmi_ub.c, DCMI only: npu-smi has no UB query): each full-width port
    # carries ub_flits_per_second (and ub_bandwidth_mbps) each way, except port ub_degraded_port (0: none), which
    # is `partial` (linked on part of its lanes, half the flits) or `down` (not linked) and counts the CRC errors
    # and retransmissions
    "ub_flits_per_second": (NUMBER, 0),
    "ub_bandwidth_mbps": (NUMBER, 0),  # what the bandwidth call measures on a full-width port, MB/s each way
    "ub_degraded_port": (NUMBER, 0),
    "ub_degraded_port_status": (TEXT, "partial"),
    "ub_crc_errors": (NUMBER, 0),
    "ub_retries": (NUMBER, 0),
    # "no": the chip has dropped out of npu-smi's table (the card-drop scenario); its PCI device stays in sysfs
    "present": (TEXT, "yes"),
}
_FOLLOWS = {"hbm_temperature_celsius": "temperature_celsius", "npu_utilization_percent": "aicore_percent"}
HEALTH_STATES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
# npu-smi's `Compatibility` values (the npu-smi source, FORMATS.md 4.6); real captures show only OK
COMPATIBILITY_STATES = ("OK", "NOK", "UNKNOWN", "NOT SUPPORT")
# hccn_tool's net health states (tool_ops.c:36-47) and the older drivers' "Socket failed"
NET_HEALTH_STATES = ("Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded", "Fault", "Init",
                     "Thread error", "Detect ip set", "Unknown", "Socket failed")
TEXT_CHOICES = {"health": HEALTH_STATES, "compatibility": COMPATIBILITY_STATES,  # the allowed value of each TEXT
                "network_link": ("UP", "DOWN"), "network_health": NET_HEALTH_STATES,
                "network_optical": ("ok", "degraded", "absent", "unsupported"), "network_ip": ("set", "none"),
                "network_gateway": ("set", "none"), "network_hccn": ("answers", "blocks"), "present": ("yes", "no"),
                "hccs_health": ("OK", "NOK"), "ub_degraded_port_status": ("partial", "down")}

# Host values: name -> (kind, default). Only cpu_busy_ratio may change over time (it drives the fake
# /proc/stat counters on every call); the rest describe the host as written at prepare time.
HOST_FIELDS: Dict[str, Tuple[str, Any]] = {
    "hostname": ("text", "sim-host"),
    "numa_nodes": ("integer", 2),
    "cpus_per_node": ("integer", 4),
    "cpu_busy_ratio": ("ratios", [0.2]),  # one value per NUMA node, or one value for all of them
    "memory_total_bytes": ("integer", 549755813888),
    "memory_available_bytes": ("integer", 412316860416),
    "numa_balancing": ("integer", 0),
    "max_map_count": ("integer", 262144),
    "driver_version": ("text", "25.5.1"),
    "firmware_version": ("text", "7.7.0.1.231"),
    "cann_version": ("text", "8.1.RC1"),
    "driver_compatible_firmware": ("text", "[7.0.0,7.7.99]"),
    "firmware_compatible_driver": ("text", "[23.0.0,25.5.99]"),
    "missing_device_files": ("paths", []),
    # device files written with a mode their owner (whoever runs the simulation) cannot open
    "inaccessible_device_files": ("paths", []),
    "pcie_links": ("links", []),  # [{device: 3, current_speed: "8.0 GT/s PCIe", current_width: 8}]
}
DEFAULT_SERVING_QUEUE_DEPTH = 2


@dataclass
class ChipValues:
    """One chip's values at one moment, in npu-smi's units (C, W, %, MiB, pages)."""

    health: str
    errors: List[Tuple[int, str]]  # (error code, information)
    temperature_celsius: int
    hbm_temperature_celsius: int
    board_temperature_celsius: int
    power_watts: float
    aicore_percent: int
    aivector_percent: int
    aicube_percent: int
    npu_utilization_percent: int
    aicpu_percent: int
    ctrlcpu_percent: int
    vectorcore_percent: int
    dvpp_percent: int
    memory_used_mb: int  # HBM on the 910 family, DDR on the 310 family
    hbm_bandwidth_percent: int
    ddr_bandwidth_percent: int
    aicore_freq_mhz: int
    hugepages_total: int
    hugepages_used: int
    ecc_single_bit_errors: int
    ecc_double_bit_errors: int
    ecc_single_bit_isolated_pages: int
    ecc_double_bit_isolated_pages: int
    processes: List[Tuple[int, str, int]] = field(default_factory=list)  # (pid, name, memory MiB)
    compatibility: str = "OK"  # firmware/driver match as `-t board` prints it for the chip's card
    ddr_used_mb: int = 0  # the 910 A1's DDR (every other 910 prints 0 / 0; the 310 family's is memory_used_mb)
    hccs_health: str = "OK"
    hccs_traffic_gbps: float = 0.0
    hccs_degraded_link: int = 0
    hccs_degraded_lanes: int = 4
    hccs_crc_errors: int = 0
    hccs_retries: int = 0
    sio_tx_crc_errors: int = 0
    sio_rx_crc_errors: int = 0
    t: float = 0.0  # the scenario time of these values (the link packet counters grow with it)


def evaluate(expression: Any, t: float, phase: float = 0.0) -> Any:
    """The value of one expression at scenario time t (seconds)."""
    if not isinstance(expression, dict):
        return expression
    if "steps" in expression:
        value = expression["steps"][0][1]
        for at, step_value in expression["steps"]:
            if t >= at:
                value = step_value
        return value
    value = float(expression.get("start", 0.0)) + float(expression.get("per_minute", 0.0)) * t / 60.0
    amplitude = float(expression.get("wobble", 0.0))
    if amplitude:
        period = float(expression.get("period_seconds", 60.0))
        value += amplitude * math.sin(2.0 * math.pi * t / period + phase)
    if "max" in expression:
        value = min(value, float(expression["max"]))
    if "min" in expression:
        value = max(value, float(expression["min"]))
    return value


def _chip_expressions(chips_spec: Dict[str, Any], device_id: int) -> Dict[str, Any]:
    """The expressions that apply to one chip: built-in defaults < `default` < matching overrides."""
    merged = {name: default for name, (_, default) in CHIP_FIELDS.items()}
    merged.update(chips_spec.get("default", {}))
    for override in chips_spec.get("overrides", []):
        if device_id in override["devices"]:
            merged.update(override["values"])
    return merged


def resolved_chip_expressions(chips_spec: Dict[str, Any], device_id: int, rated_freq_mhz: int) -> Dict[str, Any]:
    """Every field's expression for one chip, the followers and the rated frequency filled in (the
    simulated libdcmi.so evaluates these same expressions, sim/dcmi/state.py)."""
    expressions = _chip_expressions(chips_spec, device_id)
    for name, source in _FOLLOWS.items():
        if expressions[name] is None:
            expressions[name] = expressions[source]
    if expressions["aicore_freq_mhz"] is None:
        expressions["aicore_freq_mhz"] = rated_freq_mhz
    return expressions


def chip_phase(device_id: int) -> float:
    """The wobble phase of a chip's numbers, so chips differ."""
    return 0.7 * device_id


def chip_values_at(chips_spec: Dict[str, Any], device_id: int, t: float, memory_total_mb: int,
                   rated_freq_mhz: int, ddr_total_mb: int = 0) -> ChipValues:
    expressions = resolved_chip_expressions(chips_spec, device_id, rated_freq_mhz)
    phase = chip_phase(device_id)
    numbers = {name: evaluate(expressions[name], t, phase)
               for name, (kind, _) in CHIP_FIELDS.items() if kind == NUMBER}
    used_share = min(100.0, max(0.0, numbers.pop("memory_used_percent"))) / 100.0
    ddr_share = min(100.0, max(0.0, numbers.pop("ddr_used_percent"))) / 100.0
    return ChipValues(
        health=evaluate(expressions["health"], t),
        compatibility=evaluate(expressions["compatibility"], t),
        errors=[(int(error["code"], 16), error["information"]) for error in expressions["errors"]],
        temperature_celsius=int(round(numbers["temperature_celsius"])),
        hbm_temperature_celsius=int(round(numbers["hbm_temperature_celsius"])),
        board_temperature_celsius=int(round(numbers["board_temperature_celsius"])),
        power_watts=max(0.0, numbers["power_watts"]),
        memory_used_mb=int(round(memory_total_mb * used_share)),
        ddr_used_mb=int(round(ddr_total_mb * ddr_share)),
        aicore_freq_mhz=_count(numbers["aicore_freq_mhz"]),
        hugepages_total=_count(numbers["hugepages_total"]),
        hugepages_used=_count(numbers["hugepages_used"]),
        processes=[(process_pid(process, device_id, index), process["name"],
                    _process_memory_mb(process, memory_total_mb, t))
                   for index, process in enumerate(expressions["processes"])],
        **{name: _percent(numbers[name]) for name in numbers if name.endswith("_percent")},
        **{name: _counter(numbers[name]) for name in numbers if name.startswith("ecc_")},
        hccs_health=evaluate(expressions["hccs_health"], t),
        hccs_traffic_gbps=max(0.0, float(numbers["hccs_traffic_gbps"])),
        hccs_degraded_link=_count(numbers["hccs_degraded_link"]),
        hccs_degraded_lanes=_count(numbers["hccs_degraded_lanes"]),
        **{name: _counter(numbers[name]) for name in numbers if name.startswith(("hccs_crc", "hccs_retr", "sio_"))},
        t=t,
    )


def network_values_at(chips_spec: Dict[str, Any], device_id: int, t: float) -> Dict[str, Any]:
    """The chip's `network_*` values at scenario time t, by name without the prefix (sim/hccn.py)."""
    expressions = _chip_expressions(chips_spec, device_id)
    return {name[len("network_"):]: evaluate(expressions[name], t, 0.7 * device_id)
            for name in CHIP_FIELDS if name.startswith("network_")}


def chip_present_at(chips_spec: Dict[str, Any], device_id: int, t: float) -> bool:
    """Whether npu-smi lists the chip at scenario time t."""
    return evaluate(_chip_expressions(chips_spec, device_id)["present"], t) != "no"


def probe_plan_at(chips_spec: Dict[str, Any], device_id: int, t: float) -> Dict[str, Any]:
    """What the simulated pyACL does when a probe opens this logical device at scenario time t. Only the
    delay of a slow call changes over time; a ramp that dips below 0 means no delay."""
    plan = dict(_chip_expressions(chips_spec, device_id)["probe"])
    if "delay_seconds" in plan:
        plan["delay_seconds"] = max(0.0, float(evaluate(plan["delay_seconds"], t, 0.7 * device_id)))
    return plan


def host_cpu_busy_at(host_spec: Dict[str, Any], t: float) -> List[float]:
    """One busy ratio (0..1) per NUMA node at scenario time t."""
    expressions = host_spec["cpu_busy_ratio"]
    if len(expressions) == 1:
        expressions = expressions * host_spec["numa_nodes"]
    return [min(1.0, max(0.0, float(evaluate(expression, t, 0.9 * node))))
            for node, expression in enumerate(expressions)]


def host_with_defaults(host_spec: Dict[str, Any]) -> Dict[str, Any]:
    merged = {name: default for name, (_, default) in HOST_FIELDS.items()}
    merged.update(host_spec)
    return merged


def process_pid(process: Dict[str, Any], device_id: int, index: int) -> int:
    """The pid of a chip's `index`th scenario process: its own, or a distinct, stable and realistic-looking one
    made up without asking the scenario for it."""
    return int(process.get("pid", 2290156 + 97 * device_id + index))


def _process_memory_mb(process: Dict[str, Any], memory_total_mb: int, t: float) -> int:
    if "memory_mb" in process:
        return int(process["memory_mb"])
    percent = min(100.0, max(0.0, float(evaluate(process["memory_percent"], t))))
    return int(round(memory_total_mb * percent / 100.0))


def _percent(value: float) -> int:
    return int(round(min(100.0, max(0.0, value))))


def _count(value: float) -> int:
    return int(round(max(0.0, value)))


def _counter(value: float) -> int:
    # counters only ever show whole events; floor so a rising counter does not jump early
    return min(UINT32_MAX, int(math.floor(max(0.0, value))))


def diag_plan_at(chips_spec: Dict[str, Any], device_id: int) -> Dict[str, Any]:
    """What the simulated device does on this logical device under `npumon diag` (sim/diag_acl.py)."""
    return dict(_chip_expressions(chips_spec, device_id)["diag"])


def process_environments(chips_spec: Dict[str, Any], device_ids: List[int]) -> Dict[int, Dict[str, str]]:
    """pid -> environment of every scenario process that sets one (the simulated /proc/<pid>/environ)."""
    environments = {}
    for device_id in device_ids:
        for index, process in enumerate(_chip_expressions(chips_spec, device_id)["processes"]):
            if process.get("environment"):
                environments[process_pid(process, device_id, index)] = process["environment"]
    return environments
