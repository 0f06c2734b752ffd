"""One screen of `npumon top` as lines of (text, style), from the document, the view's state and the history.

Every line fits `width`; with a `height` the frame fits it too: the header and the key line always, then the
chip rows, then the findings, then the sources, each cut short with a `... N more` line where the screen ends.
Styles name what the line is ("title", "header", "critical", "warning", "selected", "dim", ""); the terminal
layer maps them to colours, the plain output ignores them.
"""

import textwrap
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..sources.serving.view import serving_text
from . import rows, widgets
from .history import SERIES, History, parse_time
from .keys import HELP, ViewState

Line = Tuple[str, str]
KEYS_LINE = "q quit  ? help  s sort  t/p/u/m temp/power/util/hbm  r reverse  / filter  Up/Down select  Enter detail"


def shown_chips(document: Optional[Dict[str, Any]], state: ViewState) -> List[Dict[str, Any]]:
    """The chips on screen, in screen order: the filter applied, then the sort."""
    chips = [c for c in (document or {}).get("chips") or [] if isinstance(c, dict)]
    return rows.sort_chips([c for c in chips if rows.matches(c, state.filter)], state.sort, state.reverse)


def render_frame(document: Optional[Dict[str, Any]], state: ViewState, history: History, width: int,
                 height: Optional[int] = None, origin: str = "", error: Optional[str] = None,
                 now: Optional[float] = None, unicode: bool = True) -> List[Line]:
    """The whole screen. `origin`: where the data comes from (shown in the title); `error`: why the last read
    failed (the last good document is still shown); `height` None: no limit (plain output)."""
    now = time.time() if now is None else now
    width = max(1, width)
    top = _title(document, state, origin, error, now)
    if state.help:
        body = [("KEYS", "header")] + [("  {:<18} {}".format(key, what), "") for key, what in HELP]
        sections = [body]
    elif document is None:
        sections = [[("waiting for the first reading ...", "dim")]]
    elif state.detail is not None:
        sections = _detail(document, state.detail, history, width, unicode, now)
    else:
        sections = _overview(document, state, width, now)
    bottom = [_prompt(state)] if state.editing is not None else [(KEYS_LINE, "dim")]
    body = _fit_sections(sections, None if height is None else max(0, height - len(top) - len(bottom)))
    lines = top + body
    if height is not None:  # a screen shorter than the title still shows the key line
        lines = lines[:max(0, height - len(bottom))]
        bottom = bottom[:max(0, height)]
    lines = lines + bottom
    return [(widgets.fit(text, width), style) for text, style in lines]


def _title(document, state: ViewState, origin: str, error: Optional[str], now: float) -> List[Line]:
    if document is None:
        first = "npumon top" + (" - " + origin if origin else "")
        return [(first, "title")] + ([("! " + error, "critical")] if error else [])
    chips = document.get("chips") or []
    stamp = parse_time(document.get("time"))
    status = str(document.get("status") or "unknown").upper()
    parts = ["npumon top", "host {}".format(document.get("host") or "?"),
             "{} chip{}".format(len(chips), "" if len(chips) == 1 else "s"), status,
             "read {} ago".format(widgets.age(None if stamp is None else now - stamp))]
    if origin:
        parts.append(origin)
    style = {"CRITICAL": "critical", "WARNING": "warning", "UNKNOWN": "warning"}.get(status, "title")
    lines = [(" | ".join(parts), style)]
    facts = document.get("host_facts") or {}
    second = ["sort: {}{}".format(rows.SORT_TITLES.get(state.sort, state.sort), " (reversed)" if state.reverse else "")]
    if state.filter:
        second.append("filter: {} ({} of {} chips)".format(state.filter, len(shown_chips(document, state)),
                                                         len(chips)))
    if facts.get("cpu_ratio") is not None:
        second.append("host CPU {:.0%}".format(facts["cpu_ratio"]))
    if facts.get("load1") is not None:
        second.append("load {:.2f}".format(facts["load1"]))
    if facts.get("memory_available_bytes") is not None and facts.get("memory_total_bytes"):
        second.append("memory free {}".format(widgets.size(facts["memory_available_bytes"])))
    if document.get("driver_version"):
        second.append("driver {}".format(document["driver_version"]))
    lines.append(("  ".join(second), "dim"))
    extra = facts.get("extra") if isinstance(facts.get("extra"), dict) else {}
    serving = extra.get("serving") if isinstance(extra.get("serving"), dict) else None
    depth = facts.get("serving_queue_depth")
    text = serving_text(depth if isinstance(depth, (int, float)) else None, serving)
    if text is not None:
        lines.append(("serving " + text, "dim"))
    if error:
        lines.append(("! {} (showing the last reading)".format(error), "critical"))
    if document.get("error"):
        lines.append(("! {}".format(document["error"]), "warning"))
    return lines


def _overview(document: Dict[str, Any], state: ViewState, width: int, now: float) -> List[List[Line]]:
    chips = shown_chips(document, state)
    findings = [f for f in document.get("findings") or [] if isinstance(f, dict)]
    layout = rows.columns(chips, width)
    table = [(rows.header(layout), "header")]
    selected = min(state.selected, len(chips) - 1)
    for index, chip in enumerate(chips):
        style = "selected" if index == selected else (rows.chip_severity(chip, findings) or "")
        table.append((rows.join(rows.row_cells(chip, layout), layout), style))
    if not chips:
        table.append(("no chip matches the filter {!r} (Esc clears it)".format(state.filter) if state.filter
                      else "no chips in this reading", "dim"))
    return [table, _findings(findings, width), _sources(document, now)]


HINT_INDENT = " " * 12
HINT_LINES = 4  # a hint longer than this many lines ends in "..."; `npumon check` prints it whole


def _findings(findings: Sequence[Dict[str, Any]], width: int, only: Optional[str] = None) -> List[Line]:
    chosen = [f for f in findings if only is None or f.get("subject") == only]
    if not chosen:
        return [("", ""), ("FINDINGS: none", "header")]
    lines = [("", ""), ("FINDINGS ({})".format(len(chosen)), "header")]
    for finding in chosen:
        severity = str(finding.get("severity") or "?")
        tag = severity.upper() + (" (shadow)" if finding.get("shadow") else "")
        style = severity if severity in ("critical", "warning") and not finding.get("shadow") else ""
        lines.append(("  {:<9} {:<12} {}: {}".format(tag, str(finding.get("subject")), finding.get("rule"),
                                                     finding.get("summary")), style))
        if finding.get("hint"):
            wrapped = textwrap.wrap("hint: " + str(finding["hint"]), max(20, width - len(HINT_INDENT)))
            if len(wrapped) > HINT_LINES:
                wrapped = wrapped[:HINT_LINES - 1] + [widgets.fit(wrapped[HINT_LINES - 1], max(20, width - 15)) + " ..."]
            lines.extend((HINT_INDENT + text, "dim") for text in wrapped)
    return lines


def _sources(document: Dict[str, Any], now: float) -> List[Line]:
    """One line per source: state and the age of its last success (values older than max age are dropped)."""
    lines = [("", ""), ("SOURCES", "header")]
    for name, status in sorted((document.get("sources") or {}).items()):
        if not isinstance(status, dict):
            continue
        state = "unsupported" if status.get("unsupported") else (
            ("DEGRADED" if status.get("degraded") else "ok") if status.get("ok") else "FAILED")
        if state == "FAILED" and status.get("last_success") is None and status.get("error") == "not polled yet":
            state = "pending"  # its first poll has not run yet: not a failure
        last = status.get("last_success")
        seen = "never" if last is None else widgets.age(now - last) + " ago"
        detail = " - " + str(status["error"]) if status.get("error") else ""
        style = "warning" if state in ("FAILED", "DEGRADED") else ""
        lines.append(("  {:<18} {:<11} last success {}{}".format(name, state, seen, detail), style))
    return lines


def _detail(document: Dict[str, Any], key: Tuple[int, int], history: History, width: int, unicode: bool,
            now: float) -> List[List[Line]]:
    chip = next((c for c in document.get("chips") or [] if (c.get("npu"), c.get("chip")) == key), None)
    name = "npu{}/chip{}".format(*key)
    if chip is None:
        return [[("{} is not in the latest reading (Esc goes back)".format(name), "warning")]]
    used, total = rows.memory(chip)
    head = [("CHIP {}  {}  health {}  bus {}".format(name, chip.get("name") or "-", chip.get("health") or "-",
                                                     chip.get("bus_id") or "-"), "header"),
            ("  temperature {}  power {}  AI Core {}  vector {}  HBM bandwidth {}  memory {}".format(
                widgets.number(chip.get("temperature_celsius"), "{:.0f} C"),
                widgets.number(chip.get("power_watts"), "{:.1f} W"),
                widgets.number(chip.get("aicore_ratio"), "{:.0%}"), widgets.number(rows.vector_ratio(chip), "{:.0%}"),
                widgets.number(rows.bandwidth_ratio(chip), "{:.0%}"), widgets.gib(used, total)), ""),
            ("  network {}  probe {}  pods {}".format(rows.net_cell(chip), rows.probe_cell(chip),
                                                      ", ".join(rows.pod_name(p) for p in chip.get("pods") or [])
                                                      or "-"), "")]
    head.extend(_network_lines(chip.get("network")))
    spark = [("", ""), ("HISTORY (last {} seen by top)".format(widgets.age(history.span_seconds(*key))), "header")]
    for series, title, _ in SERIES:
        values = history.values(key[0], key[1], series)
        known = [v for v in values if v is not None]
        latest = "-" if not known else "{:.0f}".format(known[-1])
        span = "" if not known else " (min {:.0f}, max {:.0f})".format(min(known), max(known))
        label = "  {:<14}{:>5} ".format(title, latest)
        line_width = max(0, width - len(label) - len(span) - 1)
        low_high = (0.0, 100.0) if series in ("aicore", "hbm") else (None, None)
        spark.append((label + widgets.sparkline(values, line_width, unicode, *low_high) + span, ""))
    processes = chip.get("processes") or []
    procs = [("", ""), ("PROCESSES ({})".format(len(processes)), "header")]
    ordered = sorted((p for p in processes if isinstance(p, dict)),
                     key=lambda p: (p.get("memory_bytes") is None, -(p.get("memory_bytes") or 0), p.get("pid") or 0))
    if ordered:
        procs.append(("  {:>9}  {:<24} {:>10}".format("PID", "NAME", "MEMORY"), "dim"))
    for process in ordered:
        procs.append(("  {:>9}  {:<24} {:>10}".format(str(process.get("pid")), widgets.fit(str(process.get("name") or "-"), 24),
                                                      widgets.size(process.get("memory_bytes"))), ""))
    codes = chip.get("error_codes") or []
    errors = [("", ""), ("ERROR CODES: {}".format(", ".join(codes) if codes else "none"), "header")]
    errors += [("  " + str(text), "") for text in chip.get("error_information") or []]
    findings = [f for f in document.get("findings") or [] if isinstance(f, dict)]
    return [head, spark, procs, errors, _findings(findings, width, only=name)]


def _network_lines(network: Any) -> List[Line]:
    """The RoCE port in a few words: speed, link counters, the latest changes (hccn source; full polls only)."""
    if not isinstance(network, dict) or network.get("link_status") is None:
        return []
    parts = ["  port {}".format(network.get("link_status"))]
    if network.get("speed_mbps") is not None:
        parts.append("{:g} Gb/s".format(network["speed_mbps"] / 1000))
    if network.get("net_health") is not None:
        parts.append("net health {}".format(network["net_health"]))
    if network.get("link_up_count") is not None or network.get("link_down_count") is not None:
        parts.append("link up {} / down {}".format(network.get("link_up_count", "-"), network.get("link_down_count", "-")))
    changes = [c for c in network.get("link_changes") or [] if isinstance(c, dict)][:3]
    if changes:
        parts.append("last changes: " + ", ".join("{} {}".format(c.get("state"), c.get("time")) for c in changes))
    return [("  ".join(parts), "")]


def _prompt(state: ViewState) -> Line:
    return ("filter (card 3, chip 3/1, or text; Enter applies, Esc cancels): " + (state.editing or "") + "_",
            "header")


def _fit_sections(sections: Sequence[List[Line]], room: Optional[int]) -> List[Line]:
    """The sections in order, as many lines as `room` allows; a section cut short ends in `... N more`."""
    out: List[Line] = []
    for section in sections:
        if room is not None and len(out) + len(section) > room:
            left = room - len(out)
            if left <= 0:
                break
            cut = section[:left - 1]
            hidden = len(section) - len(cut)
            out.extend(cut)
            out.append(("  ... {} more line{} (a taller window shows them)".format(hidden, "" if hidden == 1 else "s"),
                        "dim"))
            break
        out.extend(section)
    return out
