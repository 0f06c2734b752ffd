"""The families Huawei's npu-exporter serves, rendered from npumon's Snapshot (`exporter.npu_exporter_compat`).

Names, HELP texts, label sets, units and value encodings follow npu-exporter's code (Ascend/mind-cluster
component/npu-exporter, as summed up in shared/reference/npu-exporter/COMPAT.md): so that dashboards, alert
rules and tools written for it (HAMi-WebUI, KubeSphere, Grafana boards) keep working. Which families exist on
which chip family is npu-exporter's choice too: it has no DDR group on 910B/A3/950 and no HBM group on the 310
family, so neither does this. A value npu-smi did not print gives no sample, as a failed DCMI call does there.

Differences that cannot be helped: no explicit timestamps (npumon serves every sample untimestamped), the
container labels come from the kubelet's pod-resources API (the Kubernetes source; empty without it, see
npu_exporter_container.py), and values npu-smi cannot give are left out (PCIe bandwidth and vNPU families;
docs/npu-exporter.md's mapping table lists them). The network, RoCE
and optical families come from hccn_tool (npu_exporter_network.py), the HCCS and SIO families from the
link queries (npu_exporter_links.py), the 950's UB-port families from DCMI (npu_exporter_ub.py).
"""

import os
import platform
from typing import Dict, List, Optional, Sequence

from .. import __version__
from ..model import MIB, ChipSample, Snapshot
from .families import Families, MetricSpec
from .npu_exporter_container import container_metrics, pod_labels, process_container, render_containers
from .npu_exporter_links import link_metrics, render_links
from .npu_exporter_ub import render_ub, ub_metrics
from .npu_exporter_network import network_metrics, render_network

# npu-exporter's label sets (COMPAT.md section 2): L1, LN (model_name renamed name), L2 (processes).
CHIP_LABELS = ("id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")
NAME_LABELS = ("id", "name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")
PROCESS_LABELS = CHIP_LABELS + ("process_id", "container_id")
ERROR_CODE_SLOTS = 10  # the first 10 codes: _error_code, _error_code_1 .. _error_code_9

# Chip families as npu-exporter tells them apart (it asks DCMI; npumon reads the npu-smi chip name).
FAMILY_910A, FAMILY_910B, FAMILY_A3, FAMILY_950 = "910a", "910b", "a3", "950"
FAMILY_310P, FAMILY_310B, FAMILY_310 = "310p", "310b", "310"
HBM_FAMILIES = frozenset((FAMILY_910A, FAMILY_910B, FAMILY_A3, FAMILY_950))
NO_DDR_FAMILIES = frozenset((FAMILY_910B, FAMILY_A3, FAMILY_950))
CARD_COUNT_FAMILIES = frozenset((FAMILY_310P, FAMILY_910A, FAMILY_910B, FAMILY_A3))  # machine_card_nums
NO_VECTOR_FAMILIES = frozenset((FAMILY_910A,))
MULTI_UTIL_FAMILIES = frozenset((FAMILY_910B, FAMILY_A3, FAMILY_950))  # cube and overall utilization


def error_code_family(slot: int) -> str:
    return "npu_chip_info_error_code" if slot == 0 else "npu_chip_info_error_code_{}".format(slot)


def _chip(name: str, help_text: str) -> MetricSpec:
    return MetricSpec(name, CHIP_LABELS, help_text)


# HELP texts verbatim from npu-exporter's code (COMPAT.md section 5).
BASE_METRICS = (
    MetricSpec("npu_exporter_version_info", ("exporterVersion",), "exporter version with value '1'"),
    MetricSpec("node_base_info", ("exporterVersion", "driverVersion"), "the common information of this node"),
    MetricSpec("machine_npu_nums", (), "Amount of npu installed on the machine."),
    MetricSpec("machine_card_nums", (), "Amount of card installed on the machine."),
    MetricSpec("machine_healthy_npu_nums", (), "Amount of healthy npu on the machine."),
    MetricSpec("machine_unhealthy_npu_nums", (), "Amount of unhealthy npu on the machine."),
    MetricSpec("machine_unknown_npu_nums", (),
               "Amount of the npus whose health status cannot be obtained via DCMI interface on the machine."),
    MetricSpec("npu_chip_info_name", NAME_LABELS, "the Ascend npu name with value '1'"),
    MetricSpec("npu_chip_info_serial_number", CHIP_LABELS + ("serial_number",), "the npu serial number information"),
    _chip("npu_chip_info_health_status", "the npu health status"),
) + tuple(_chip(error_code_family(slot), "the npu error code") for slot in range(ERROR_CODE_SLOTS)) + (
    _chip("npu_chip_info_temperature", "the npu temperature"),
    _chip("npu_chip_info_power", "the npu power"),
    _chip("npu_chip_info_voltage", "the npu voltage"),
    _chip("npu_chip_info_aicore_current_freq", "the npu ai core current frequency, unit is 'MHz'"),
    _chip("npu_chip_info_process_info_num", "the npu process num"),
    MetricSpec("npu_chip_info_process_info", PROCESS_LABELS,
               "the npu process info, unit is 'MB'. if process run on host, container_id and container_name "
               "will be empty"),
    _chip("npu_chip_info_utilization", "the ai core utilization"),
    _chip("npu_chip_info_overall_utilization", "the overall utilization of npu"),
    _chip("npu_chip_info_vector_utilization", "the vector utilization"),
    _chip("npu_chip_info_cube_utilization", "the cube utilization"),
    _chip("npu_chip_info_total_memory", "the npu total memory"),
    _chip("npu_chip_info_used_memory", "the npu used memory"),
    _chip("npu_chip_info_hbm_total_memory", "the npu hbm total memory"),
    _chip("npu_chip_info_hbm_used_memory", "the npu hbm used memory"),
    _chip("npu_chip_info_hbm_utilization", "the npu hbm utilization"),
    _chip("npu_chip_info_hbm_temperature", "the npu hbm temperature"),
    _chip("npu_chip_info_hbm_bandwidth_utilization", "the npu hbm bandwidth util rate"),
    _chip("npu_chip_info_hbm_ecc_single_bit_error_cnt", "HBM Single Bit Error Count"),
    _chip("npu_chip_info_hbm_ecc_double_bit_error_cnt", "HBM Double Bit Error Count"),
    _chip("npu_chip_info_hbm_ecc_total_single_bit_error_cnt", "HBM Single Bit Aggregate Total Err Cnt"),
    _chip("npu_chip_info_hbm_ecc_total_double_bit_error_cnt", "HBM Double Bit Aggregate Total Err Cnt"),
    _chip("npu_chip_info_hbm_ecc_single_bit_isolated_pages_cnt", "HBM Single Bit Isolated Pages Count"),
    _chip("npu_chip_info_hbm_ecc_double_bit_isolated_pages_cnt", "HBM Double Bit Isolated Pages Count"),
) + network_metrics(CHIP_LABELS) + container_metrics(CHIP_LABELS) \
    + link_metrics(CHIP_LABELS) + ub_metrics(CHIP_LABELS)  # npu_exporter_network.py, _container.py, _links.py, _ub.py

NODE_LABEL = "node"


def with_node_label(specs: Sequence[MetricSpec]) -> tuple:
    """The same families with a trailing `node` label (exporter.node_label)."""
    return tuple(MetricSpec(spec.name, spec.labels + (NODE_LABEL,), spec.help) for spec in specs)


def resolve_node_label(setting: Optional[str], environ: Optional[Dict[str, str]] = None) -> Optional[str]:
    """exporter.node_label: "$NODE_NAME" reads that environment variable (a DaemonSet sets it from
    spec.nodeName); anything else is the value itself. None or empty: no `node` label."""
    if not setting:
        return None
    if setting.startswith("$"):
        value = (os.environ if environ is None else environ).get(setting[1:].strip("{}"))
        return value or None
    return setting


def exporter_version() -> str:
    """npu-exporter prints "<version>_linux-<arch>" (e.g. "v5.0.0.5_linux-aarch64"); this says it is npumon."""
    return "npumon-{}_linux-{}".format(__version__, platform.machine() or "unknown")


def chip_family(name: Optional[str]) -> Optional[str]:
    """The npu-exporter chip family of an npu-smi chip name ("910B3", "Ascend910", "310P3", "Ascend950PR")."""
    if not name:
        return None
    text = name.upper().replace(" ", "")
    if text.startswith("ASCEND"):
        text = text[len("ASCEND"):]
    if text.startswith("950"):
        return FAMILY_950
    if text.startswith("910B"):
        return FAMILY_910B
    if text.startswith("910_93") or text in ("910", "910C"):  # A3's main table prints "Ascend910"
        return FAMILY_A3
    if text.startswith("910"):  # 910A, 910ProA/B, 910PremiumA
        return FAMILY_910A
    if text.startswith("310P"):
        return FAMILY_310P
    if text.startswith("310B"):
        return FAMILY_310B
    if text.startswith("310"):
        return FAMILY_310
    return None


def chip_id(chip: ChipSample, position: int) -> int:
    """npu-exporter's `id`: the physical id; npu-smi prints it on A3 only, and elsewhere the logical id
    (`info -m` Chip Logic ID, 310P `Device`) stands in, as on every 910B and 310P capture the two agree.
    Until either is known (the identity tier runs right after the first table): the chip's position in
    npu-smi's list, which is logical-id order."""
    if chip.phy_id is not None:
        return chip.phy_id
    if chip.device_id is not None:
        return chip.device_id
    return position


def health_value(health: Optional[str]) -> Optional[int]:
    """1 healthy, 0 unhealthy (Warning, Alarm, Critical: any nonzero DCMI health), -1 unknown."""
    if health is None:
        return None
    if health == "OK":
        return 1
    return 0 if health in ("Warning", "Alarm", "Critical") else -1


def _percent(ratio: Optional[float]) -> Optional[float]:
    # Rounding undoes the float noise of the /100 done at parse time (29 -> 0.29 -> 28.999999999999996).
    return None if ratio is None else round(ratio * 100.0, 6)


def _mib(size: Optional[int]) -> Optional[float]:
    return None if size is None else size / MIB


def _hex_code(code: str) -> Optional[int]:
    try:
        return int(code, 16)
    except ValueError:
        return None


def render(out: Families, snapshot: Snapshot, node: Optional[str] = None,
           driver_version: Optional[str] = None) -> None:
    """Add every npu-exporter family the snapshot can feed to `out` (built with BASE_METRICS, or with
    with_node_label(BASE_METRICS) when `node` is set)."""
    extra = () if node is None else (node,)
    version = exporter_version()
    out.add("npu_exporter_version_info", 1, (version,) + extra)
    driver = driver_version or snapshot.driver_version or snapshot.host.driver_version
    out.add("node_base_info", 1, (version, driver or "") + extra)
    chips = snapshot.chips
    healths = [health_value(chip.health) for chip in chips]
    out.add("machine_npu_nums", len(chips), extra)
    if any(chip_family(chip.name) in CARD_COUNT_FAMILIES for chip in chips):
        out.add("machine_card_nums", len({chip.npu for chip in chips}), extra)
    out.add("machine_healthy_npu_nums", healths.count(1), extra)
    out.add("machine_unhealthy_npu_nums", healths.count(0), extra)
    out.add("machine_unknown_npu_nums", len(chips) - healths.count(1) - healths.count(0), extra)
    for position, chip in enumerate(chips):
        if not chip.extra.get("identity_pending"):  # its vdie_id is still to come: no series that would change
            _add_chip(out, chip, position, extra)


def chip_labels(chip: ChipSample, position: int) -> tuple:
    """L1 for one chip: model_name falls back to npu-smi's name until `-t board -c` has been read."""
    return (chip_id(chip, position), chip.model_name or chip.name, chip.vdie_id or "", chip.bus_id or "") + \
        pod_labels(chip)


def _add_chip(out: Families, chip: ChipSample, position: int, extra: tuple) -> None:
    labels = chip_labels(chip, position)
    family = chip_family(chip.name)
    series_labels = labels + extra
    out.add("npu_chip_info_name", 1, series_labels)
    if chip.serial_number:
        out.add("npu_chip_info_serial_number", 1, labels + (chip.serial_number,) + extra)
    out.add("npu_chip_info_health_status", health_value(chip.health), series_labels)
    codes = [number for number in map(_hex_code, chip.error_codes) if number is not None]
    for slot, number in enumerate(codes[:ERROR_CODE_SLOTS]):
        out.add(error_code_family(slot), number, series_labels)
    out.add("npu_chip_info_temperature", chip.temperature_celsius, series_labels)
    # 310P chips cannot measure their own power: npu-exporter serves the card's (its MCU's) on each chip.
    power = chip.card_power_watts if family == FAMILY_310P and chip.power_watts is None else chip.power_watts
    out.add("npu_chip_info_power", power, series_labels)
    out.add("npu_chip_info_voltage", chip.voltage_volts, series_labels)
    out.add("npu_chip_info_aicore_current_freq", chip.aicore_freq_mhz, series_labels)
    out.add("npu_chip_info_process_info_num", len(chip.processes), series_labels)
    for process in chip.processes:
        container_id, container_name = process_container(chip, process.pid)
        out.add("npu_chip_info_process_info", _mib(process.memory_bytes),
                labels[:-1] + (container_name, process.pid, container_id) + extra)
    _add_utilization(out, chip, family, series_labels)
    _add_memory(out, chip, family, series_labels)
    render_network(out, chip.extra.get("network"), series_labels)
    render_links(out, chip, series_labels)
    render_ub(out, chip, labels, extra)
    render_containers(out, chip, labels, extra, family in HBM_FAMILIES, _percent(chip.aicore_ratio))


def _add_utilization(out: Families, chip: ChipSample, family: Optional[str], labels: tuple) -> None:
    out.add("npu_chip_info_utilization", _percent(chip.aicore_ratio), labels)
    if family not in NO_VECTOR_FAMILIES:
        # npu-exporter reads "vector" from aiv_util on 910B/A3 and from Vector Core (type 12) on 310P.
        vector = chip.aivector_ratio if chip.aivector_ratio is not None else chip.vectorcore_ratio
        out.add("npu_chip_info_vector_utilization", _percent(vector), labels)
    if family in MULTI_UTIL_FAMILIES or family is None:
        out.add("npu_chip_info_cube_utilization", _percent(chip.aicube_ratio), labels)
        out.add("npu_chip_info_overall_utilization", _percent(chip.npu_util_ratio), labels)


def _add_memory(out: Families, chip: ChipSample, family: Optional[str], labels: tuple) -> None:
    # npu-exporter has no DDR group on 910B/A3/950 (npu-smi prints their DDR as 0 / 0) and no HBM group on the
    # 310 family: those families are absent there, not zero.
    if family not in NO_DDR_FAMILIES and chip.memory_total_bytes:
        out.add("npu_chip_info_total_memory", _mib(chip.memory_total_bytes), labels)
        out.add("npu_chip_info_used_memory", _mib(chip.memory_used_bytes), labels)
    if family not in HBM_FAMILIES and family is not None:
        return
    out.add("npu_chip_info_hbm_total_memory", _mib(chip.hbm_total_bytes), labels)
    out.add("npu_chip_info_hbm_used_memory", _mib(chip.hbm_used_bytes), labels)
    usage = chip.hbm_usage_ratio
    if usage is None and chip.hbm_total_bytes and chip.hbm_used_bytes is not None:
        usage = chip.hbm_used_bytes / chip.hbm_total_bytes  # the table's figures, until -t usages answers
    out.add("npu_chip_info_hbm_utilization", None if usage is None else round(usage * 100.0, 6), labels)
    out.add("npu_chip_info_hbm_temperature", chip.hbm_temperature_celsius, labels)
    out.add("npu_chip_info_hbm_bandwidth_utilization", _percent(chip.hbm_bandwidth_ratio), labels)
    hbm = (chip.ecc or {}).get("hbm") or {}
    counters = (chip.ecc_counters or {}).get("hbm") or {}
    for name, value in (
        ("npu_chip_info_hbm_ecc_single_bit_error_cnt", hbm.get("single")),
        ("npu_chip_info_hbm_ecc_double_bit_error_cnt", hbm.get("double")),
        ("npu_chip_info_hbm_ecc_total_single_bit_error_cnt", counters.get("aggregate_single")),
        ("npu_chip_info_hbm_ecc_total_double_bit_error_cnt", counters.get("aggregate_double")),
        ("npu_chip_info_hbm_ecc_single_bit_isolated_pages_cnt", counters.get("isolated_single")),
        ("npu_chip_info_hbm_ecc_double_bit_isolated_pages_cnt", counters.get("isolated_double")),
    ):
        out.add(name, value, labels)


def family_names() -> List[str]:
    return [spec.name for spec in BASE_METRICS]
