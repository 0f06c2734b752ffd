"""The ACL runtime's own view of each chip, beside npu-smi's: the runtime facts the probe child reports
(runtime_facts.py), as they sit in the Snapshot, the rule facts they give and the metric families they fill.
Pure functions, no I/O.

A chip carries them as `chip.extra["runtime"]` (so `check --json` shows a `runtime` object per chip):

    {"time": <unix time of the probe>, "device_id": 3,
     "values": {"device_count": {"value": 8, "source": "acl.rt.get_device_count", "status": "ok"},
                "cube_ratio": {"value": null, "source": "acl.rt.get_device_utilization_rate",
                               "status": "unsupported"}, ...}}
"""

import re
from typing import Any, Dict, List, Optional

from ...model import ChipSample, HostSample, Snapshot
from ...outputs.families import Families, MetricSpec
from .aclcodes import describe
from .runtime_facts import FACT_NAMES, OK, UNSUPPORTED

EXTRA_KEY = "runtime"
# set_device's answer when the device cannot be opened; seen when CANN and the driver do not match
# (shared/reference/acl-probe-fan-power.md section 4: Ascend/samples#21, PaddlePaddle/Paddle#68865)
DEV_SETUP_ERROR = 507033
ENGINES = (("cube", "cube_ratio"), ("vector", "vector_ratio"), ("aicpu", "aicpu_ratio"), ("memory", "memory_ratio"))

Facts = Dict[str, Any]


def runtime_record(time: float, device_id: int, values: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    return {"time": time, "device_id": device_id, "values": values}


def runtime_values(chip: ChipSample) -> Dict[str, Dict[str, Any]]:
    record = chip.extra.get(EXTRA_KEY)
    return record.get("values", {}) if isinstance(record, dict) else {}


def value_of(values: Dict[str, Dict[str, Any]], name: str) -> Any:
    entry = values.get(name)
    return entry.get("value") if entry is not None and entry.get("status") == OK else None


def fact_name(name: str) -> str:
    return name if name.startswith("runtime_") else "runtime_" + name


# -- rule facts ------------------------------------------------------------------------------------------


def soc_matches(chip_name: Optional[str], soc_name: Optional[str]) -> Optional[bool]:
    """Whether the runtime's SoC name fits the chip npu-smi names: "910B3" ~ "Ascend910B3", "Ascend910" ~
    "Ascend910_9382" (one is a prefix of the other once "Ascend", spaces and underscores are dropped)."""
    if not chip_name or not soc_name:
        return None
    chip, soc = _soc_key(chip_name), _soc_key(soc_name)
    if not chip or not soc:
        return None
    return chip.startswith(soc) or soc.startswith(chip)


def _soc_key(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name.lower()).replace("ascend", "")


def npu_smi_free_bytes(chip: ChipSample) -> Optional[int]:
    """Free device memory as npu-smi sees it: HBM where the chip has it, else its DDR (310P / 310B, where the
    runtime's HBM query maps to DDR too)."""
    if chip.hbm_total_bytes and chip.hbm_used_bytes is not None:
        return chip.hbm_total_bytes - chip.hbm_used_bytes
    if chip.memory_total_bytes and chip.memory_used_bytes is not None:
        return chip.memory_total_bytes - chip.memory_used_bytes
    return None


def chip_facts(chip: ChipSample, host: HostSample) -> Facts:
    values = runtime_values(chip)
    facts: Facts = {fact_name(name): value_of(values, name) for name in FACT_NAMES}
    smi_free = npu_smi_free_bytes(chip)
    runtime_free, runtime_total = value_of(values, "hbm_free_bytes"), value_of(values, "hbm_total_bytes")
    shortfall = None if smi_free is None or runtime_free is None else smi_free - runtime_free
    facts.update({
        "runtime_soc_matches": soc_matches(chip.name, facts["runtime_soc_name"]),
        "runtime_npu_smi_free_bytes": smi_free,
        # how much less free memory the runtime sees than npu-smi, and that as a share of the memory
        "runtime_hbm_shortfall_bytes": shortfall,
        "runtime_hbm_shortfall_ratio": None if shortfall is None or not runtime_total else shortfall / runtime_total,
        "runtime_hbm_text": _memory_text(runtime_free, runtime_total, smi_free),
        "runtime_unsupported": sorted(name for name, entry in values.items() if entry.get("status") == UNSUPPORTED),
        "runtime_errors": "; ".join("{} {}".format(entry["source"], entry.get("error", "failed"))
                                    for entry in values.values() if entry.get("status") == "error") or "none",
    })
    return facts


def _memory_text(runtime_free: Optional[int], runtime_total: Optional[int], smi_free: Optional[int]) -> str:
    if runtime_free is None or smi_free is None:
        return "n/a"
    return "the runtime sees {:.1f} GiB free of {} GiB, npu-smi {:.1f} GiB".format(
        runtime_free / 2**30, "?" if not runtime_total else "{:.1f}".format(runtime_total / 2**30), smi_free / 2**30)


def host_facts(snapshot: Snapshot) -> Facts:
    counts = [value_of(runtime_values(chip), "device_count") for chip in snapshot.chips]
    counts = [count for count in counts if isinstance(count, int)]
    device_count = min(counts) if counts else None
    mismatch, reason = driver_mismatch(snapshot)
    return {
        "runtime_device_count": device_count,
        "runtime_missing_device_count": None if device_count is None else max(0, len(snapshot.chips) - device_count),
        "runtime_driver_mismatch": mismatch,
        "runtime_driver_mismatch_reason": reason,
    }


def driver_mismatch(snapshot: Snapshot) -> "tuple":
    """(True | False | None, why): does the runtime fit the installed driver? True when the runtime reports
    another driver version than /usr/local/Ascend/driver/version.info, or set_device returned 507033;
    False when the versions agree; None when nothing tells."""
    host = snapshot.host
    installed = host.driver_version
    seen = sorted({value_of(runtime_values(chip), "driver_version") for chip in snapshot.chips} - {None})
    reasons: List[str] = []
    if installed is not None and seen and seen != [installed]:
        reasons.append("the ACL runtime reports driver {} but driver/version.info says {}".format(
            ", ".join(seen), installed))
    refused = [chip for chip in snapshot.chips if chip.probe is not None and chip.probe.state == "failed"
               and chip.probe.failed_stage == "set_device" and chip.probe.error_code == DEV_SETUP_ERROR]
    if refused:
        reasons.append("set_device returned {} ({}) on {}: the runtime's answer when CANN {} and driver {} do "
                       "not match".format(DEV_SETUP_ERROR, describe(DEV_SETUP_ERROR).name,
                                          ", ".join(chip.subject for chip in refused),
                                          host.cann_version or "(version unknown)", installed or "(version unknown)"))
    if reasons:
        return True, "; ".join(reasons)
    if installed is not None and seen:
        return False, "the runtime reports driver {}, as installed".format(installed)
    return None, "cannot tell: " + ("no runtime driver version (older pyACL or no probe yet)" if installed
                                    else "driver/version.info unreadable")


# -- the check table ----------------------------------------------------------------------------------------


def runtime_cell(chip: ChipSample) -> str:
    """The check table's RUNTIME column, beside PROBE: what the runtime reports, `Ascend910B3 7.7G free cube
    53%` (cube only where this pyACL reports it), `-` while the probe has not asked."""
    values = runtime_values(chip)
    if not values:
        return "-"
    cells = [value_of(values, "soc_name") or "?"]
    free = value_of(values, "hbm_free_bytes")
    if free is not None:
        cells.append("{:.1f}G free".format(free / 2**30))
    cube = value_of(values, "cube_ratio")
    if cube is not None:
        cells.append("cube {:.0%}".format(cube))
    return " ".join(cells)


# -- metrics -----------------------------------------------------------------------------------------------

CHIP = ("npu", "chip")
METRICS = (
    MetricSpec("npumon_chip_runtime_utilization_ratio", CHIP + ("engine", "source"),
               "Utilisation of each engine as the ACL runtime reports it (acl.rt.get_device_utilization_rate, "
               "source=\"acl\"), 0..1; absent where this pyACL or device does not support it."),
    MetricSpec("npumon_chip_runtime_hbm_free_bytes", CHIP,
               "Free device memory as the ACL runtime sees it (acl.rt.get_mem_info; DDR on 310P / 310B)."),
    MetricSpec("npumon_chip_runtime_hbm_total_bytes", CHIP,
               "Total device memory as the ACL runtime sees it (acl.rt.get_mem_info; DDR on 310P / 310B)."),
    MetricSpec("npumon_chip_runtime_info", CHIP + ("soc_name", "acl_version", "runtime_version", "driver_version"),
               "What the ACL runtime reports about the chip, value 1; empty labels where it does not say."),
    MetricSpec("npumon_runtime_devices", (),
               "Devices the ACL runtime sees (acl.rt.get_device_count), fewest any probe of this host reported."),
)


def export(snapshot: Snapshot, out: Families) -> None:
    for chip in snapshot.chips:
        values = runtime_values(chip)
        if not values:
            continue
        ids = (chip.npu, chip.chip)
        for engine, name in ENGINES:
            out.add("npumon_chip_runtime_utilization_ratio", value_of(values, name), ids + (engine, "acl"))
        out.add("npumon_chip_runtime_hbm_free_bytes", value_of(values, "hbm_free_bytes"), ids)
        out.add("npumon_chip_runtime_hbm_total_bytes", value_of(values, "hbm_total_bytes"), ids)
        out.add("npumon_chip_runtime_info", 1, ids + tuple(value_of(values, name) for name in (
            "soc_name", "acl_version", "runtime_version", "driver_version")))
    out.add("npumon_runtime_devices", host_facts(snapshot)["runtime_device_count"])
