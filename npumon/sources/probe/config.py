"""The `probe:` section of the config file.

    probe:
      enabled: true
      interval_seconds: 300          # each chip is probed this often (plus up to jitter_seconds)
      skip_busy_above_ratio: 0.8     # AI Core above this: not now (null: probe busy chips too)
      kind: acl                      # or torch (a matmul with torch_npu)
      compute: true                  # acl: a known-answer Add on the AI Core in every probe (compute.py)
      model: {path: /opt/probe/add.om, input_file: in.bin, expected_output_file: out.bin}

Paths of the Ascend install default to the usual layout under the config's ascend_dir
(ascend-toolkit/latest, driver/lib64/...), as CANN's set_env.sh sets them.
"""

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .protocol import DTYPE_FORMATS, KINDS

MIN_BASELINE_RUNS = 3
MAX_COPY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ProbeModelConfig:
    """A small .om model run by the acl probe: one input, one output compared within a tolerance."""

    path: str = ""
    input_file: str = ""  # raw bytes, exactly the model's input size
    expected_output_file: str = ""  # raw bytes, exactly the model's output size
    dtype: str = "float32"  # of the output: float32, float16, int32, int8, uint8
    tolerance: float = 1e-3  # largest allowed absolute difference per value


@dataclass(frozen=True)
class ProbeConfig:
    enabled: bool = True
    interval_seconds: float = 300.0
    jitter_seconds: float = 30.0  # a random 0..jitter is added to each chip's next due time
    timeout_seconds: float = 30.0  # hard deadline of one chip's probe (the probe process's watchdog)
    round_timeout_seconds: float = 60.0  # one round (all due chips; all chips in `npumon check`)
    # probe processes at a time: a round's due chips are split into this many groups, one process each
    max_concurrent: int = 2
    skip_busy_above_ratio: Optional[float] = 0.8  # AI Core ratio; null probes busy chips too
    kind: str = "acl"  # acl | torch
    python: Optional[str] = None  # interpreter for the probe (pyACL is built per Python); default: npumon's
    toolkit_dir: Optional[str] = None  # default: <ascend_dir>/ascend-toolkit/latest
    acl_python_path: Optional[str] = None  # where `import acl` is found; default: <toolkit>/python/site-packages
    library_path: Optional[List[str]] = None  # LD_LIBRARY_PATH entries; default: driver and toolkit lib64
    environment: Dict[str, str] = field(default_factory=dict)  # extra variables for the probe process
    copy_bytes: int = 65536
    sync_timeout_ms: int = 5000
    model: Optional[ProbeModelConfig] = None
    compute: bool = True  # acl: an Add on the AI Core, by the path the installed CANN offers
    # ATC's one build of the Add model per SoC and CANN version; at most half of timeout_seconds
    compute_build_timeout_seconds: float = 15.0
    atc_path: Optional[str] = None  # default: <toolkit>/compiler/bin/atc; also builds npumon diag's MatMul
    # for aclopCompileAndExecute, and where the aclnn libraries are (beside it); default: <toolkit>/lib64/libascendcl.so
    acl_library: Optional[str] = None
    matmul_size: int = 64  # torch
    matmul_tolerance: float = 0.01  # torch: rtol and atol
    baseline_runs: int = 20  # warm successful probes in each chip's latency baseline
    # acl: the probe also asks the runtime what it sees of the device (count, SoC, versions, memory, utilisation)
    runtime_facts: bool = True


def build_timeout_seconds(probe: ProbeConfig) -> float:
    """How long the compute step's ATC build may take: the setting, capped at half the probe's deadline so that
    the probe still finishes after a build."""
    return min(probe.compute_build_timeout_seconds, probe.timeout_seconds / 2)


def probe_config_problems(probe: ProbeConfig) -> List[Tuple[str, str]]:
    """(dotted key, problem) for every setting that cannot work; config.py turns the first into its error."""
    problems: List[Tuple[str, str]] = []

    def check(condition: bool, key: str, problem: str) -> None:
        if not condition:
            problems.append(("probe." + key, problem))

    check(probe.interval_seconds > 0, "interval_seconds", "must be greater than 0 (use enabled: false to turn it off)")
    check(probe.jitter_seconds >= 0, "jitter_seconds", "must be 0 or more")
    check(probe.timeout_seconds > 0, "timeout_seconds", "must be greater than 0")
    check(probe.round_timeout_seconds >= probe.timeout_seconds, "round_timeout_seconds",
          "must be at least probe.timeout_seconds ({:g}), or no probe could ever start".format(probe.timeout_seconds))
    check(probe.max_concurrent >= 1, "max_concurrent", "must be at least 1")
    check(probe.skip_busy_above_ratio is None or 0 <= probe.skip_busy_above_ratio <= 1, "skip_busy_above_ratio",
          "must be a ratio from 0 to 1, or null to probe busy chips too")
    check(probe.kind in KINDS, "kind", "must be one of {}".format(", ".join(KINDS)))
    if probe.python is not None:
        check(os.path.isfile(probe.python) and os.access(probe.python, os.X_OK), "python",
              "not an executable file: {}".format(probe.python))
    for name in probe.environment:
        check(bool(name) and "=" not in name, "environment." + name, "not a valid environment variable name")
    check(1 <= probe.copy_bytes <= MAX_COPY_BYTES, "copy_bytes", "must be from 1 to {}".format(MAX_COPY_BYTES))
    check(probe.sync_timeout_ms >= 1, "sync_timeout_ms", "must be at least 1")
    check(probe.sync_timeout_ms < probe.timeout_seconds * 1000, "sync_timeout_ms",
          "must be shorter than probe.timeout_seconds, so that a stuck stream is reported by the runtime (507046)")
    check(probe.compute_build_timeout_seconds > 0, "compute_build_timeout_seconds", "must be greater than 0")
    check(1 <= probe.matmul_size <= 4096, "matmul_size", "must be from 1 to 4096")
    check(probe.matmul_tolerance > 0, "matmul_tolerance", "must be greater than 0")
    check(probe.baseline_runs >= MIN_BASELINE_RUNS, "baseline_runs", "must be at least {}".format(MIN_BASELINE_RUNS))
    if probe.model is not None:
        problems.extend(_model_problems(probe))
    return problems


def _model_problems(probe: ProbeConfig) -> List[Tuple[str, str]]:
    model = probe.model
    problems = []
    if probe.kind != "acl":
        problems.append(("probe.model", "only the acl probe runs a model (probe.kind is {})".format(probe.kind)))
    for key in ("path", "input_file", "expected_output_file"):
        path = getattr(model, key)
        if not path:
            problems.append(("probe.model." + key, "required"))
        elif not os.path.isfile(path):
            problems.append(("probe.model." + key, "no such file: {}".format(path)))
    if model.dtype not in DTYPE_FORMATS:
        problems.append(("probe.model.dtype", "must be one of {}".format(", ".join(sorted(DTYPE_FORMATS)))))
    if model.tolerance < 0:
        problems.append(("probe.model.tolerance", "must be 0 or more"))
    return problems
