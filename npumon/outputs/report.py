"""Snapshot + findings -> what people and other tools read: the overall status, the `check --json`
document (also served as `/status`), and the human table with a Nagios status line and perfdata.
Pure functions, no I/O."""

import dataclasses
import datetime
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..model import ChipSample, Finding, ProbeSample, ProcessSample, Snapshot, chip_json
from ..rules.verdict import HEALTHY, HostVerdict, decide
from ..sources.npusmi.source import TABLE_SOURCE
from ..sources.probe.runtime_view import runtime_cell
from ..sources.serving.view import serving_text
from .colour import HEALTH_MEANINGS, PLAIN, Painter

SCHEMA = "npumon.check/v1"
EXIT_CODES = {"ok": 0, "warning": 1, "critical": 2, "unknown": 3}
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def overall_status(snapshot: Snapshot, findings: Sequence[Finding]) -> str:
    """UNKNOWN when the main table could not be read (nothing was checked); else the worst finding, and at
    least WARNING when the table was degraded (a chip's row was unreadable, so that chip went unchecked).
    Shadow findings never change the status: they are being tried out."""
    table = snapshot.sources.get(TABLE_SOURCE)
    if table is None or not table.ok or not snapshot.chips:
        return "unknown"
    severities = {finding.severity for finding in findings if not finding.shadow}
    if table.degraded:
        severities.add("warning")
    for status in ("critical", "warning"):
        if status in severities:
            return status
    return "ok"


def rfc3339(unix_time: float) -> str:
    moment = datetime.datetime.fromtimestamp(unix_time, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def sorted_findings(findings: Sequence[Finding]) -> List[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER.get(f.severity, 9), f.subject, f.rule))


def verdict_of(snapshot: Snapshot, findings: Sequence[Finding]) -> HostVerdict:
    """The verdicts of one pass, without the daemon's guard rails (what `check` shows)."""
    return decide(findings, [chip.subject for chip in snapshot.chips])


def status_document(snapshot: Snapshot, findings: Sequence[Finding], extra: Optional[Dict[str, Any]] = None,
                    acknowledged: Sequence[Finding] = (), verdict: Optional[HostVerdict] = None) -> Dict[str, Any]:
    """The `npumon.check/v1` document (contract: see DESIGN.md). `acknowledged`: findings an operator
    acknowledged whose condition still holds; listed apart, they no longer count for the status. `verdict`: the
    daemon's guarded verdicts; by default this pass's own."""
    document = {
        "schema": SCHEMA,
        "host": snapshot.host.hostname,
        "time": rfc3339(snapshot.time),
        "status": overall_status(snapshot, findings),
        "tool_version": snapshot.tool_version,
        "driver_version": snapshot.driver_version,
        "chips": [chip_json(chip) for chip in snapshot.chips],
        "findings": [finding.to_json() for finding in sorted_findings(findings)],
        "acknowledged": [finding.to_json() for finding in sorted_findings(acknowledged)],
        "sources": {name: status.to_json() for name, status in sorted(snapshot.sources.items())},
        "host_facts": dataclasses.asdict(snapshot.host),
        "verdict": (verdict or verdict_of(snapshot, findings)).to_json(),
    }
    if extra:
        document.update(extra)
    return document


# -- human and Nagios output ----------------------------------------------------------------------------

# NRPE passes at most 1,024 bytes of a plugin's output (its MAX_PACKETBUFFER_LENGTH for v2 packets): the
# status line with its perfdata must fit, whatever the host. The table follows on the next lines.
STATUS_LINE_LIMIT = 1024
SUMMARY_LIMIT = 300


def nagios_line(snapshot: Snapshot, findings: Sequence[Finding], params: Dict[str, float],
                error: Optional[str] = None) -> str:
    """`NPU <STATUS> - <summary> | <perfdata>`, at most STATUS_LINE_LIMIT bytes. `error`: why the check is
    UNKNOWN although it read something (it timed out)."""
    status = "unknown" if error else overall_status(snapshot, findings)
    active = [f for f in sorted_findings(findings) if not f.shadow and f.severity != "info"]
    if error:
        summary = error
    elif status == "unknown":
        table = snapshot.sources.get(TABLE_SOURCE)
        reason = table.error if table is not None and table.error else "no chips found"
        summary = "cannot read npu-smi: {}".format(reason)
    elif active:
        summary = "{} finding{}: {}".format(len(active), "" if len(active) == 1 else "s",
                                            "; ".join("{} {}".format(f.subject, f.summary) for f in active[:3]))
        if len(active) > 3:
            summary += "; ..."
    else:
        summary = "{} chip{} OK".format(len(snapshot.chips), "" if len(snapshot.chips) == 1 else "s")
    table = snapshot.sources.get(TABLE_SOURCE)
    if not error and status != "unknown" and table is not None and table.degraded:
        summary = "npu-smi table {}; {}".format(table.error, summary)
    summary = summary.replace("|", "/").replace("\n", " ")  # '|' starts perfdata in the Nagios protocol
    if len(summary) > SUMMARY_LIMIT:
        summary = summary[:SUMMARY_LIMIT - 3].rstrip() + "..."
    line = "NPU {} - {}".format(status.upper(), summary)
    perf = perfdata(snapshot, params, budget=STATUS_LINE_LIMIT - len(line.encode("utf-8")) - len(" | "))
    return line + (" | " + perf if perf else "")


def perfdata(snapshot: Snapshot, params: Dict[str, float], budget: Optional[int] = None) -> str:
    """Nagios perfdata (plugin guidelines: label=value[UOM];warn;crit;min;max, UOM one of s % B c or none).
    Within `budget` bytes: the host-wide figures first, then per chip temperature, AI Core, power, HBM, as many
    as fit (a 16-chip host's full set is over NRPE's limit)."""
    warn = _num(params.get("temperature_warning_celsius"))
    crit = _num(params.get("temperature_critical_celsius"))
    chips = snapshot.chips
    temperatures = [chip.temperature_celsius for chip in chips if chip.temperature_celsius is not None]
    powers = [chip.power_watts for chip in chips if chip.power_watts is not None]
    items = []
    if temperatures:
        items.append("'temp_max'={};{};{};;".format(_num(max(temperatures)), warn, crit))
    if powers:
        items.append("'power_total'={};;;0;".format(_num(sum(powers))))  # watts: no Nagios unit for them
    for kind in ("temp", "aicore", "power", "hbm_used"):
        for chip in chips:
            item = _chip_perfdata(chip, kind, warn, crit)
            if item:
                items.append(item)
    chosen, used = [], 0
    for item in items:
        cost = len(item.encode("utf-8")) + (1 if chosen else 0)
        if budget is not None and used + cost > budget:
            break  # later items are less important; a partial set stays in a stable order
        chosen.append(item)
        used += cost
    return " ".join(chosen)


def _chip_perfdata(chip, kind: str, warn: str, crit: str) -> Optional[str]:
    label = "npu{}_chip{}".format(chip.npu, chip.chip)
    if kind == "temp" and chip.temperature_celsius is not None:
        return "'{}_temp'={};{};{};;".format(label, _num(chip.temperature_celsius), warn, crit)
    if kind == "aicore" and chip.aicore_ratio is not None:
        return "'{}_aicore'={}%;;;0;100".format(label, _num(chip.aicore_ratio * 100))
    if kind == "power" and chip.power_watts is not None:
        return "'{}_power'={};;;0;".format(label, _num(chip.power_watts))
    if kind == "hbm_used" and chip.hbm_used_bytes is not None:
        return "'{}_hbm_used'={}B;;;0;{}".format(label, chip.hbm_used_bytes,
                                                 "" if chip.hbm_total_bytes is None else chip.hbm_total_bytes)
    return None


def _num(value: Optional[float]) -> str:
    """Nagios forbids scientific notation; keep it short."""
    if value is None:
        return ""
    text = "{:.3f}".format(value).rstrip("0").rstrip(".")
    return text if text != "-0" else "0"


def render_table(snapshot: Snapshot, findings: Sequence[Finding], paint: Painter = PLAIN) -> str:
    """The human table; `paint` colours the health cells, the findings' severities and the sources' states
    (a person at a terminal), or leaves them plain."""
    lines = []
    title = "host {}".format(snapshot.host.hostname)
    if snapshot.tool_version:
        title += ", npu-smi {} (driver {})".format(snapshot.tool_version, snapshot.driver_version or "?")
    lines.append(title + ", {} chip{}".format(len(snapshot.chips), "" if len(snapshot.chips) == 1 else "s"))
    if snapshot.chips:
        rows = [("NPU", "CHIP", "NAME", "HEALTH", "TEMP", "POWER", "AICORE", "HBM BW", "MEMORY USED", "BUS-ID",
                 "RUNTIME", "NET", "PROBE")]
        for chip in snapshot.chips:
            used, total = (chip.hbm_used_bytes, chip.hbm_total_bytes) if chip.hbm_total_bytes else (
                chip.memory_used_bytes, chip.memory_total_bytes)
            rows.append((
                str(chip.npu), str(chip.chip), chip.name or "-", chip.health or "-",
                _fmt(chip.temperature_celsius, "{:.0f}C"), _fmt(chip.power_watts, "{:.1f}W"),
                _fmt(chip.aicore_ratio, "{:.0%}"), _fmt(chip.hbm_bandwidth_ratio, "{:.0%}"),
                "-" if used is None or not total else "{:.1f}/{:.1f} GiB".format(used / 2**30, total / 2**30),
                chip.bus_id or "-",
                runtime_cell(chip),
                _net_cell(chip.extra.get("network")),
                _probe_cell(chip.probe),
            ))
        lines.extend(_columns(rows, lambda row, column, cell: paint(cell, "heading") if row == 0 else (
            paint(cell, HEALTH_MEANINGS.get(cell.strip())) if column == 3 else cell)))
        lines.append("")
        lines.extend(process_lines(snapshot.chips))
    serving = serving_text(snapshot.host.serving_queue_depth, snapshot.host.extra.get("serving"))
    if serving is not None:
        lines.append("")
        lines.append(paint("SERVING", "heading") + " " + serving)
    lines.append("")
    shown = sorted_findings(findings)
    lines.append(paint("FINDINGS", "heading") if shown else "FINDINGS: " + paint("none", "ok"))
    for finding in shown:
        tag = finding.severity.upper() + (" (shadow)" if finding.shadow else "")
        lines.append("  {} {:<14} {}: {}".format(paint("{:<9}".format(tag), finding.severity), finding.subject,
                                                 finding.rule, finding.summary))
        lines.append("            hint: {}".format(finding.hint))
        if finding.repair_action is not None:
            lines.append("            repair: {}{}".format(
                finding.repair_action, "" if finding.level is None else " (level {})".format(finding.level)))
    lines.append("")
    lines.extend(verdict_lines(verdict_of(snapshot, findings)))
    lines.append("")
    lines.append(paint("SOURCES", "heading"))
    for name, status in sorted(snapshot.sources.items()):
        state = "unsupported" if status.unsupported else (
            ("DEGRADED" if status.degraded else "ok") if status.ok else "FAILED")
        took = "" if status.duration_seconds is None else " {:.2f}s".format(status.duration_seconds)
        detail = "" if not status.error else " - " + status.error
        lines.append("  {:<16} {}{}{}".format(name, paint(state, _SOURCE_MEANINGS.get(state)), took, detail))
    return "\n".join(lines)


def verdict_lines(verdict: HostVerdict) -> List[str]:
    """The host's verdict, then each chip that is not healthy with the reason that decided it."""
    healthy = sum(1 for chip in verdict.chips if chip.state == HEALTHY)
    lines = ["VERDICT: host {}{}, {} of {} chip{} healthy".format(
        verdict.state.replace("_", " "),
        " ({})".format(verdict.reasons[0].rule) if verdict.reasons else "",
        healthy, len(verdict.chips), "" if len(verdict.chips) == 1 else "s")]
    for chip in verdict.chips:
        if chip.state == HEALTHY:
            continue
        first = chip.reasons[0]
        more = len(chip.reasons) - 1
        lines.append("  {:<14} {:<15} {}: {}{}".format(
            chip.subject, chip.state.replace("_", " "), first.rule, chip.repair_action,
            " (+{} more)".format(more) if more else ""))
    return lines


def processes_by_memory(processes: Sequence[ProcessSample]) -> List[ProcessSample]:
    """Largest memory first, unknown memory last, equal memory by pid: a stable order from pass to pass."""
    return sorted(processes, key=lambda p: (p.memory_bytes is None, -(p.memory_bytes or 0), p.pid))


def process_lines(chips: Sequence[ChipSample]) -> List[str]:
    """The PROCESSES section: every process npu-smi lists, per chip, largest memory first."""
    rows = [("NPU", "CHIP", "PID", "NAME", "MEMORY")]
    for chip in chips:
        for process in processes_by_memory(chip.processes):
            rows.append((str(chip.npu), str(chip.chip), str(process.pid), process.name or "-",
                         "-" if process.memory_bytes is None else _size(process.memory_bytes)))
    if len(rows) == 1:
        return ["PROCESSES: none"]
    return ["PROCESSES ({})".format(len(rows) - 1)] + ["  " + line for line in _columns(rows)]


def _size(size_bytes: int) -> str:
    """npu-smi prints MiB; GiB from 1 GiB up reads better on 64 GiB chips."""
    if size_bytes >= 2**30:
        return "{:.1f} GiB".format(size_bytes / 2**30)
    return "{:.0f} MiB".format(size_bytes / 2**20)


def _fmt(value: Optional[float], pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def _net_cell(network: Optional[Dict[str, Any]]) -> str:
    """The RoCE port (sources/hccn): `UP`, `DOWN`, `UP Unreachable` (net health when it is not Success/Init),
    `-` on chips without a port or while hccn_tool has not answered (a quick check does not ask it)."""
    if not network or network.get("link_status") is None:
        return "-"
    cells = [network["link_status"]]
    health = network.get("net_health")
    if health is not None and health not in ("Success", "Init"):
        cells.append(health)
    return " ".join(cells)


def _probe_cell(probe: Optional[ProbeSample]) -> str:
    """`ok 12ms compute 1.2ms`, `ok 12ms no compute` (compute unavailable), `FAILED compute 507046`, `unavailable`,
    `skipped`; the details are in the findings and JSON."""
    if probe is None:
        return "-"
    if probe.state == "ok":
        cell = "ok " + _duration_text(probe.duration_seconds or 0.0)
        if "compute" in probe.stage_seconds:  # the AI Core's own step (sources/probe/compute.py)
            return cell + " compute " + _duration_text(probe.stage_seconds["compute"])
        return cell + (" no compute" if (probe.detail or "").startswith("compute unavailable") else "")
    if probe.state == "failed":
        return " ".join(["FAILED", probe.failed_stage or "?"] + ([str(probe.error_code)] if probe.error_code else []))
    return probe.state


def _duration_text(seconds: float) -> str:
    if seconds < 0.01:
        return "{:.1f}ms".format(seconds * 1000)
    return "{:.0f}ms".format(seconds * 1000) if seconds < 1 else "{:.1f}s".format(seconds)


_SOURCE_MEANINGS = {"ok": "ok", "DEGRADED": "warning", "FAILED": "critical"}


def _columns(rows: List[tuple], paint: Optional[Callable[[int, int, str], str]] = None) -> List[str]:
    """Aligned columns; `paint(row, column, padded cell)` colours a cell after padding, so that the colour
    codes never count in a column's width."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for number, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        cells[-1] = cells[-1].rstrip()
        lines.append("  ".join(paint(number, column, cell) if paint else cell
                               for column, cell in enumerate(cells)).rstrip())
    return lines
