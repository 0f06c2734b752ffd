"""One row per chip from the `/status` document: the cells, their order (sort keys) and the chip filter.

Chips are the document's dicts (model.chip_json), so the same code reads a daemon's `/status` and a local
collection. A key a document lacks (an older daemon, a product without it) shows as `-`, never as an error.
"""

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import widgets

Chip = Dict[str, Any]

# sort key name -> what the header says; `s` cycles through them in this order
SORTS = ("npu", "temp", "power", "util", "hbm", "health")
SORT_TITLES = {"npu": "NPU", "temp": "temperature", "power": "power", "util": "AI Core", "hbm": "HBM used",
               "health": "health"}
HEALTH_RANK = {"Critical": 0, "Alarm": 1, "Warning": 2, "UNKNOWN": 3, "OK": 4}
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def subject(chip: Chip) -> str:
    return "npu{}/chip{}".format(chip.get("npu"), chip.get("chip"))


def vector_ratio(chip: Chip) -> Optional[float]:
    """AI Vector on 910 chips; the 310P's vector cores report as vectorcore."""
    value = chip.get("aivector_ratio")
    return chip.get("vectorcore_ratio") if value is None else value


def bandwidth_ratio(chip: Chip) -> Optional[float]:
    """HBM bandwidth; chips with DDR instead of HBM (310P, 310B) report DDR bandwidth."""
    value = chip.get("hbm_bandwidth_ratio")
    return chip.get("ddr_bandwidth_ratio") if value is None else value


def memory(chip: Chip) -> Tuple[Optional[float], Optional[float]]:
    """(used, total) bytes of the chip's main memory: HBM where it has some, else DDR."""
    if chip.get("hbm_total_bytes"):
        return chip.get("hbm_used_bytes"), chip.get("hbm_total_bytes")
    return chip.get("memory_used_bytes"), chip.get("memory_total_bytes")


def memory_ratio(chip: Chip) -> Optional[float]:
    used, total = memory(chip)
    return None if used is None or not total else used / total


def sort_chips(chips: Sequence[Chip], key: str, reverse: bool = False) -> List[Chip]:
    """Chips in the order of `key`: the NPU order ascending, the measures worst first (hottest, most power,
    busiest, fullest, unhealthiest); `reverse` flips that. Unknown values go last either way, and ties keep
    the NPU order, so rows do not jump between refreshes."""
    def place(chip: Chip) -> Tuple[int, int]:
        return (_int(chip.get("npu")), _int(chip.get("chip")))

    if key == "npu":
        return sorted(chips, key=place, reverse=reverse)
    measure = {
        "temp": lambda c: c.get("temperature_celsius"),
        "power": lambda c: c.get("power_watts"),
        "util": lambda c: c.get("aicore_ratio"),
        "hbm": memory_ratio,
        "health": lambda c: None if c.get("health") is None else -HEALTH_RANK.get(c.get("health"), 3),
    }[key]
    known = [c for c in chips if _number(measure(c))]
    unknown = [c for c in chips if not _number(measure(c))]
    ordered = sorted(sorted(known, key=place), key=measure, reverse=not reverse)  # stable: ties by place
    return ordered + sorted(unknown, key=place)


def matches(chip: Chip, text: str) -> bool:
    """The `/` filter: a bare number is a card id (`3` = npu 3), `3/1` or `npu3/chip1` one chip, anything else a
    substring of the subject, name, bus id, health or a process name (case-insensitive)."""
    text = text.strip().lower()
    if not text:
        return True
    if text.isdigit():
        return str(chip.get("npu")) == text
    parts = text.split("/")
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        return [str(chip.get("npu")), str(chip.get("chip"))] == parts
    haystack = [subject(chip), chip.get("name"), chip.get("bus_id"), chip.get("health")]
    haystack += [p.get("name") for p in chip.get("processes") or [] if isinstance(p, dict)]
    return any(text in str(item).lower() for item in haystack if item is not None)


def chip_severity(chip: Chip, findings: Sequence[Dict[str, Any]]) -> Optional[str]:
    """The worst of the chip's own active findings and its health: how its row is coloured."""
    worst = None
    for finding in findings:
        if finding.get("subject") == subject(chip) and not finding.get("shadow"):
            severity = finding.get("severity")
            if worst is None or SEVERITY_RANK.get(severity, 9) < SEVERITY_RANK.get(worst, 9):
                worst = severity
    health = chip.get("health")
    if health == "Critical":
        return "critical"
    if health in ("Alarm", "Warning") and worst != "critical":
        return "warning"
    return worst if worst in ("critical", "warning") else None


def pods_cell(chip: Chip) -> str:
    """A chip's pods where the snapshot has them (`pods`: names, or objects with namespace and name)."""
    pods = chip.get("pods")
    if not isinstance(pods, list) or not pods:
        return "-"
    first = pod_name(pods[0])
    return first if len(pods) == 1 else "{} +{}".format(first, len(pods) - 1)


def pod_name(pod: Any) -> str:
    if isinstance(pod, dict):
        name = pod.get("name") or pod.get("pod") or "?"
        return "{}/{}".format(pod["namespace"], name) if pod.get("namespace") else str(name)
    return str(pod)


def net_cell(chip: Chip) -> str:
    """The RoCE port (hccn source): `UP`, `DOWN`, `UP Unreachable` (net health when not Success/Init), `-`."""
    network = chip.get("network")
    if not isinstance(network, dict) or network.get("link_status") is None:
        return "-"
    cells = [str(network["link_status"])]
    health = network.get("net_health")
    if health is not None and health not in ("Success", "Init"):
        cells.append(str(health))
    return " ".join(cells)


def probe_cell(chip: Chip) -> str:
    """`ok 12ms`, `FAILED memcpy 507053`, `unavailable`, `skipped`, `-` (not probed)."""
    probe = chip.get("probe")
    if not isinstance(probe, dict) or not probe.get("state"):
        return "-"
    if probe["state"] == "ok":
        seconds = probe.get("duration_seconds") or 0.0
        return "ok {:.0f}ms".format(seconds * 1000) if seconds < 1 else "ok {:.1f}s".format(seconds)
    if probe["state"] == "failed":
        code = probe.get("error_code")
        return " ".join(["FAILED", str(probe.get("failed_stage") or "?")] + ([str(code)] if code else []))
    return str(probe["state"])


def has_pods(chips: Sequence[Chip]) -> bool:
    return any("pods" in chip for chip in chips)


def columns(chips: Sequence[Chip], width: int) -> List[Tuple[str, int]]:
    """(title, width) of each column for a screen `width` wide: the bars share what the fixed columns leave,
    4..22 characters each, and drop to bare percentages on narrow screens."""
    fixed = [("NPU", 4), ("CHIP", 4), ("NAME", 8), ("HEALTH", 8), ("TEMP", 5), ("POWER", 7)]
    tail = [("HBM USED", 11), ("PROC", 4)] + ([("PODS", 16)] if has_pods(chips) else []) + [
        ("NET", 16), ("PROBE", 20)]
    used = sum(w + 1 for _, w in fixed + tail)
    bar_width = max(4, min(22, (width - used) // 3 - 1))
    return fixed + [("AICORE", bar_width), ("VECTOR", bar_width), ("HBM BW", bar_width)] + tail


def row_cells(chip: Chip, layout: Sequence[Tuple[str, int]]) -> List[str]:
    used, total = memory(chip)
    values = {
        "NPU": str(chip.get("npu")), "CHIP": str(chip.get("chip")), "NAME": str(chip.get("name") or "-"),
        "HEALTH": str(chip.get("health") or "-"),
        "TEMP": widgets.number(chip.get("temperature_celsius"), "{:.0f}C"),
        "POWER": widgets.number(chip.get("power_watts"), "{:.1f}W"),
        "HBM USED": widgets.gib(used, total), "PROC": str(len(chip.get("processes") or [])),
        "PODS": pods_cell(chip), "NET": net_cell(chip), "PROBE": probe_cell(chip),
    }
    cells = []
    for title, width in layout:
        if title in ("AICORE", "VECTOR", "HBM BW"):
            ratio = {"AICORE": chip.get("aicore_ratio"), "VECTOR": vector_ratio(chip),
                     "HBM BW": bandwidth_ratio(chip)}[title]
            cells.append(widgets.bar(ratio, width))
        else:
            cells.append(widgets.fit(values[title], width))
    return cells


def join(cells: Sequence[str], layout: Sequence[Tuple[str, int]]) -> str:
    return " ".join(cell.ljust(width) for cell, (_, width) in zip(cells, layout)).rstrip()


def header(layout: Sequence[Tuple[str, int]]) -> str:
    return join([widgets.fit(title, width) for title, width in layout], layout)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 1 << 30
