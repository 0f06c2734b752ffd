"""From the children's reports to findings and figures, each relative to the product's expected one. Pure.

A ChipRun is what one chip's child gave (or why it gave nothing); `judge(runs, thresholds, now)` returns the
findings, and `figures(runs)` the rows the table, the JSON and the metrics show. Pass criteria (docs/diag.md):
a copy reaches `copy_min_ratio` of the raw rate of the link the chip is capable of, HBM `hbm_min_ratio` of
the product's bandwidth, MatMul `matmul_min_ratio` of its peak FP16, a sustained load's last window keeps
`throttle_min_ratio` of its first, and every check of data or of a result is exact.
"""

from typing import Any, Dict, List, NamedTuple, Optional

from ..model import Finding
from .expected import Expected, pcie_bandwidth, pcie_generation
from .protocol import (COMPUTE, D2H, FAILED, H2D, HBM_PATTERN, HBM_SUSTAINED, MATMUL, MATMUL_SUSTAINED, OK, P2P,
                       UNAVAILABLE)

# The built-in values of the rule params diag_<name> (rules/builtin.yaml), which the config's `thresholds:` set.
DEFAULT_THRESHOLDS = {"copy_min_ratio": 0.6, "hbm_min_ratio": 0.6, "matmul_min_ratio": 0.5,
                      "throttle_min_ratio": 0.85}
# ACL codes that mean the AI Core, or the stream behind it, never finished (shared/reference/
# interconnect-and-compute.md section 2.2)
HUNG_CODES = (507014, 507034, 507046, 507047, 507048)
TERA = 1e12
GIGA = 1e9


class ChipRun(NamedTuple):
    subject: str  # "npu<N>/chip<C>"
    device: int
    expected: Optional[Expected]
    link: Any  # PcieLink or None
    report: Optional[Dict[str, Any]]  # the child's JSON, None when it gave none
    error: Optional[str] = None  # why there is no report (killed at the deadline, crashed)
    stuck_item: Optional[str] = None  # the item running when the child was killed
    samples: Optional[Dict[str, Any]] = None  # level 3: temperature, power, AI Core clock sampled under load
    skipped: Optional[str] = None  # why the chip was not tested (a process holds it)
    cut_short: bool = False  # killed because --timeout came, not because an item hung: no verdict on it


def _finding(rule: str, severity: str, run: ChipRun, summary: str, hint: str, action: Optional[str],
             now: float, item: Optional[str] = None) -> Finding:
    """A finding about the chip; `item` (a label) names the diag item it judges."""
    return Finding(rule=rule, severity=severity, subject=run.subject, summary=summary, hint=hint, since=now,
                   labels={"item": item} if item else {}, repair_action=action)


def expected_figure(item: str, run: ChipRun) -> Optional[float]:
    """What the item should reach on this chip (bytes/s or FLOP/s), None where nothing is published."""
    if item in (H2D, D2H):
        if run.link is not None:
            return pcie_bandwidth(run.link.max_speed_gts, run.link.max_width)
        return None if run.expected is None else pcie_bandwidth(run.expected.pcie_gts, run.expected.pcie_width)
    if run.expected is None:
        return None
    if item in (HBM_PATTERN, HBM_SUSTAINED):
        return run.expected.memory_bandwidth
    if item in (MATMUL, MATMUL_SUSTAINED):
        return run.expected.fp16_flops
    return None


def measured_figure(result: Dict[str, Any]) -> Optional[float]:
    return result.get("bytes_per_second", result.get("flops_per_second"))


def figures(runs: List[ChipRun]) -> List[Dict[str, Any]]:
    """One row per chip and item: state, measured, expected, ratio, message."""
    rows = []
    for run in runs:
        for item, result in sorted(((run.report or {}).get("items") or {}).items()):
            measured, expected = measured_figure(result), expected_figure(item, run)
            rows.append({"subject": run.subject, "device": run.device, "item": item, "state": result.get("state"),
                         "measured": measured, "expected": expected,
                         "ratio": None if measured is None or not expected else measured / expected,
                         "message": result.get("message"),
                         "unit": "FLOP/s" if item in (COMPUTE, MATMUL, MATMUL_SUSTAINED) else "B/s"})
    return rows


def _link_text(link: Any) -> str:
    if link is None:
        return "link unknown"
    return "link at Gen{} x{} ({:g} GT/s), capable of Gen{} x{}".format(
        pcie_generation(link.current_speed_gts) or "?", link.current_width, link.current_speed_gts or 0,
        pcie_generation(link.max_speed_gts) or "?", link.max_width)


def judge(runs: List[ChipRun], thresholds: Dict[str, float], now: float) -> List[Finding]:
    findings: List[Finding] = []
    for run in runs:
        findings.extend(_judge_chip(run, thresholds, now))
    return findings


def _judge_chip(run: ChipRun, thresholds: Dict[str, float], now: float) -> List[Finding]:
    if run.skipped:
        return [_finding("diag-chip-skipped", "info", run, "not tested: " + run.skipped,
                         "Diag runs only on chips no process holds, so that it cannot disturb a job or be "
                         "disturbed by one. Drain the chip and run it again, or pass --force.", None, now)]
    if run.cut_short:
        return []
    if run.report is None or run.report.get("error"):
        if run.stuck_item in (COMPUTE, MATMUL, MATMUL_SUSTAINED):
            return [_finding("diag-aicore-hang", "critical", run,
                             "{} never completed: the child was killed after {}".format(run.stuck_item, run.error),
                             "The chip accepted work and never finished it: an AI Core or its stream is hung. "
                             "Look for AIC Timeout (80C9800A) in npu-smi info -t health -i <card> and the plog; "
                             "reset the chip (npu-smi set -t reset -i <card> -c <chip>), run diag again, and "
                             "replace the card if it hangs again.", "reset_npu", now, run.stuck_item)]
        if run.stuck_item:
            return [_finding("diag-item-hang", "critical", run,
                             "{} never completed: the child was killed after {}".format(run.stuck_item, run.error),
                             "A copy on the chip never finished: its DMA path or the runtime is stuck. Check npu-smi "
                             "info -t health and the kernel log for the device; reset the chip and run diag again.",
                             "reset_npu", now, run.stuck_item)]
        message = run.error or run.report.get("error")
        return [_finding("diag-failed", "critical", run, "diag could not run: {}".format(message),
                         "The runtime could not open the chip for the workloads. Check npu-smi info -t health, "
                         "the driver and CANN versions (npumon diag -r 1), and that nothing else holds the chip.",
                         None, now)]
    out = []
    items = run.report.get("items") or {}
    for item, result in sorted(items.items()):
        state = result.get("state")
        if state == UNAVAILABLE:
            out.append(_finding("diag-item-unavailable", "info", run, "{} not run: {}".format(item,
                                result.get("message")), "Nothing was measured, so nothing is judged. See "
                                "docs/diag.md for what the item needs (ATC or the runtime's operator API for the "
                                "compute items, HCCS for the peer copy).", None, now, item))
        elif state == FAILED:
            out.append(_failed(item, result, run, now))
        elif state == OK:
            finding = _judge_figure(item, result, run, thresholds, now)
            if finding is not None:
                out.append(finding)
    if run.samples:
        out.extend(_judge_samples(run, now))
    return out


def _failed(item: str, result: Dict[str, Any], run: ChipRun, now: float) -> Finding:
    message = result.get("message") or "failed"
    code = result.get("error_code")
    if item in (COMPUTE, MATMUL, MATMUL_SUSTAINED) and code in HUNG_CODES:
        return _finding("diag-aicore-hang", "critical", run, "{}: {}".format(item, message),
                        "The MatMul never completed: an AI Core is hung. Reset the chip and run diag again; replace "
                        "the card if it hangs again.", "reset_npu", now, item)
    if item == COMPUTE:
        return _finding("diag-compute-wrong" if code is None else "diag-item-failed", "critical", run,
                        "compute check: " + message,
                        "The AI Core returned a wrong result or none. Reset the chip (npu-smi set -t reset) and run "
                        "npumon diag -r 2 again; a chip that computes wrong twice is to be replaced: its jobs "
                        "would train or answer on corrupt numbers.", "reset_npu", now, item)
    if item == HBM_PATTERN:
        return _finding("diag-hbm-pattern-errors", "critical", run, "HBM pattern: " + message,
                        "Device memory returned other bytes than were written. Check npu-smi info -t ecc and the "
                        "isolated pages; reset the chip and run diag again. HBM errors that come back mean the "
                        "card is to be replaced.", "replace_hardware", now, item)
    if item == P2P:
        return _finding("diag-p2p-failed", "critical", run, "chip-to-chip copy: " + message,
                        "A copy over HCCS to the peer chip failed. Check npu-smi info -t hccs -i <card> -c <chip> "
                        "(health, lane mode, error counts) on both chips; multi-chip jobs on this host will fail "
                        "or hang in HCCL until the link is repaired.", "inspect_hardware", now, item)
    return _finding("diag-item-failed", "critical", run, "{}: {}".format(item, message),
                    "The runtime reported an error on a plain workload. Check npu-smi info -t health and the "
                    "device log; reset the chip and run diag again.", "reset_npu", now, item)


def _judge_figure(item: str, result: Dict[str, Any], run: ChipRun, thresholds: Dict[str, float],
                  now: float) -> Optional[Finding]:
    measured, expected = measured_figure(result), expected_figure(item, run)
    if item in (HBM_SUSTAINED, MATMUL_SUSTAINED):
        first, last = result.get("first_window"), result.get("last_window")
        if first and last is not None and last < thresholds["throttle_min_ratio"] * first:
            return _finding("diag-throttling", "warning", run, "{} fell from {} to {} under sustained load "
                            "({:.0%}){}".format(item, _rate(first, item), _rate(last, item), last / first,
                                                _samples_text(run.samples)),
                            "The chip slowed down under load: the AI Core clock drops when the chip runs hot or "
                            "hits its power limit. Check the temperatures and fans (npu-smi info -t temp, "
                            "npumon control status), the air flow and the power cap.", "inspect_hardware", now, item)
    if measured is None or not expected:
        return None
    ratio = measured / expected
    if item in (H2D, D2H) and ratio < thresholds["copy_min_ratio"]:
        return _finding("diag-pcie-bandwidth-low", "warning", run, "{} copy {} is {:.0%} of {} ({})".format(
            item.upper(), _rate(measured, item), ratio, _rate(expected, item), _link_text(run.link)),
            "Copies between host and chip are slower than its PCIe link allows: model loading and input copies "
            "slow down. A link trained below its capability (lspci -vv LnkSta vs LnkCap) needs the card or riser "
            "reseated; at full link width, look at the IOMMU and the NUMA placement.", "inspect_hardware", now, item)
    if item in (HBM_PATTERN, HBM_SUSTAINED) and ratio < thresholds["hbm_min_ratio"]:
        return _finding("diag-hbm-bandwidth-low", "warning", run, "{} bandwidth {} is {:.0%} of the product's "
                        "{}".format(item, _rate(measured, item), ratio, _rate(expected, item)),
                        "Device memory is slower than the product's figure: check for throttling (temperature, "
                        "power cap) and run diag -r 3; a chip that stays slow is to be inspected.",
                        "inspect_hardware", now, item)
    if item in (MATMUL, MATMUL_SUSTAINED) and ratio < thresholds["matmul_min_ratio"]:
        return _finding("diag-matmul-slow", "warning", run, "{} {} is {:.0%} of the product's peak FP16 "
                        "{}".format(item, _rate(measured, item), ratio, _rate(expected, item)),
                        "The AI Cores compute slower than they should: check the AI Core clock and temperature "
                        "(npu-smi info -t common / -t temp) for throttling, and the power cap.",
                        "inspect_hardware", now, item)
    return None


def _judge_samples(run: ChipRun, now: float) -> List[Finding]:
    samples = run.samples or {}
    low, rated = samples.get("aicore_freq_mhz_min"), samples.get("aicore_freq_mhz_max")
    if low and rated and low < 0.9 * rated:
        return [_finding("diag-clock-dropped", "warning", run, "AI Core clock fell to {:.0f} MHz (from {:.0f}) "
                         "under load{}".format(low, rated, _samples_text(samples)),
                         "The chip lowered its clock under load: over temperature or at its power limit. Check "
                         "cooling and the power cap.", "inspect_hardware", now)]
    return []


def _samples_text(samples: Optional[Dict[str, Any]]) -> str:
    if not samples:
        return ""
    parts = []
    if samples.get("temperature_celsius_max") is not None:
        parts.append("temperature up to {:.0f} C".format(samples["temperature_celsius_max"]))
    if samples.get("power_watts_max") is not None:
        parts.append("power up to {:.0f} W".format(samples["power_watts_max"]))
    if samples.get("aicore_freq_mhz_min") is not None:
        parts.append("AI Core clock down to {:.0f} MHz".format(samples["aicore_freq_mhz_min"]))
    return "; " + ", ".join(parts) if parts else ""


def _rate(value: float, item: str) -> str:
    if item in (MATMUL, MATMUL_SUSTAINED):
        return "{:.1f} TFLOPS".format(value / TERA)
    return "{:.1f} GB/s".format(value / GIGA)
