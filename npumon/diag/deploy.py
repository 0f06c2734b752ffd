"""Level 1, deployment: the host's own rules that say "set up wrongly", and the environment of the processes
that use the NPUs. The rules are the built-in ones (rules/builtin.yaml), evaluated by the same engine as
`check`; this module only chooses them and adds what no rule reads.
"""

import os
from typing import Dict, Iterable, List, Optional, Tuple

from ..model import Finding, Snapshot
from ..sources.host.parse import HostParseError, parse_meminfo

# The built-in rules that judge the deployment rather than the chips' state now.
DEPLOYMENT_RULES = ("board-incompatible", "versions-incompatible", "device-files-missing", "device-files-inaccessible",
                    "pcie-degraded", "numa-balancing-enabled", "max-map-count-low")
MAX_ENVIRON_BYTES = 1 << 20  # /proc/<pid>/environ is bounded by ARG_MAX in practice; read no more than this
# ASCEND_GLOBAL_LOG_LEVEL: 0 debug, 1 info, 2 warning, 3 error (CANN environment variable reference)
LOUD_LOG_LEVELS = {"0": "debug", "1": "info"}
HCCL_TIMEOUT_VARIABLES = ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT")


def deployment_findings(findings: Iterable[Finding]) -> List[Finding]:
    return [finding for finding in findings if finding.rule in DEPLOYMENT_RULES]


def parse_environ(data: bytes) -> Dict[str, str]:
    """/proc/<pid>/environ: NUL-separated NAME=value entries."""
    variables = {}
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            variables[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return variables


def environment_problems(variables: Dict[str, str]) -> List[Tuple[str, str, str]]:
    """(rule, severity, summary) for each setting that hurts a production job."""
    problems = []
    level = variables.get("ASCEND_GLOBAL_LOG_LEVEL", "").strip()
    if level in LOUD_LOG_LEVELS:
        problems.append(("env-log-level-verbose", "warning",
                         "ASCEND_GLOBAL_LOG_LEVEL={} ({})".format(level, LOUD_LOG_LEVELS[level])))
    if variables.get("ASCEND_SLOG_PRINT_TO_STDOUT", "").strip() == "1":
        problems.append(("env-log-to-stdout", "warning", "ASCEND_SLOG_PRINT_TO_STDOUT=1"))
    multi_node = _int(variables.get("WORLD_SIZE")) or 0
    local = _int(variables.get("LOCAL_WORLD_SIZE")) or 0
    if multi_node > local > 0 and not any(name in variables for name in HCCL_TIMEOUT_VARIABLES):
        problems.append(("env-hccl-timeouts-default", "info",
                         "multi-node job (WORLD_SIZE={}, LOCAL_WORLD_SIZE={}) with HCCL timeouts at their "
                         "defaults".format(multi_node, local)))
    return problems


HINTS = {
    "env-log-level-verbose": "Debug and info logging writes plog for every operator: it fills /root/ascend/log (or "
                             "ASCEND_PROCESS_LOG_PATH) and slows the job. Set ASCEND_GLOBAL_LOG_LEVEL=3 (error) in "
                             "production and restart the job.",
    "env-log-to-stdout": "Every runtime log line goes to the job's stdout as well, which floods the container log "
                         "and slows the job. Unset ASCEND_SLOG_PRINT_TO_STDOUT (or set 0) and restart the job.",
    "env-hccl-timeouts-default": "Across nodes, link set-up and collective waits can exceed HCCL's default "
                                 "timeouts at scale, and a job then fails at start-up. Set HCCL_CONNECT_TIMEOUT "
                                 "and HCCL_EXEC_TIMEOUT for the job's size (see the HCCL environment variables).",
}


def process_environment_findings(snapshot: Snapshot, root: str, now: float) -> List[Finding]:
    """One finding per problem per NPU process whose environment can be read under `root`."""
    findings = []
    seen = set()
    for chip in snapshot.chips:
        for process in chip.processes or ():
            pid = process.pid
            if pid in seen:
                continue
            seen.add(pid)
            variables = read_environ(root, pid)
            if variables is None:
                continue
            for rule, severity, summary in environment_problems(variables):
                findings.append(Finding(rule=rule, severity=severity, subject=chip.subject,
                                        summary="process {} ({}): {}".format(pid, process.name, summary),
                                        hint=HINTS[rule], since=now, repair_action="restart_workload"))
    return findings


def read_environ(root: str, pid: int) -> Optional[Dict[str, str]]:
    """The process's environment, None when it is gone or not readable (another user's, without root)."""
    try:
        with open(os.path.join(root, "proc", str(pid), "environ"), "rb") as handle:
            return parse_environ(handle.read(MAX_ENVIRON_BYTES))
    except OSError:
        return None


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


HUGEPAGES_HINT = ("Allocations that ask for huge pages (the host's for pinned buffers, the chip's as npu-smi's "
                  "Hugepages-Usage column counts them) fail or fall back to small pages once none is free. Find the "
                  "processes holding them (npu-smi info lists each chip's); on the host, raise vm.nr_hugepages.")


def hugepages_findings(snapshot: Snapshot, root: str, now: float) -> List[Finding]:
    """Huge pages configured and all taken: on the host (/proc/meminfo) and on each chip (npu-smi)."""
    findings = []
    try:
        with open(os.path.join(root, "proc", "meminfo"), encoding="utf-8", errors="replace") as handle:
            meminfo = parse_meminfo(handle.read(MAX_ENVIRON_BYTES))
    except (OSError, HostParseError):
        meminfo = {}
    total, free = meminfo.get("HugePages_Total", 0), meminfo.get("HugePages_Free")
    if total > 0 and free == 0:
        findings.append(Finding(rule="hugepages-exhausted", severity="warning", subject="host",
                                summary="all {} huge pages of the host are in use".format(total),
                                hint=HUGEPAGES_HINT, since=now))
    for chip in snapshot.chips:
        if chip.hugepages_total and chip.hugepages_used is not None and chip.hugepages_used >= chip.hugepages_total:
            findings.append(Finding(rule="hugepages-exhausted", severity="warning", subject=chip.subject,
                                    summary="all {} huge pages of the chip are in use".format(chip.hugepages_total),
                                    hint=HUGEPAGES_HINT, since=now))
    return findings
