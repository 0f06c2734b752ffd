"""ProbeOutcome -> the ProbeSample a chip carries in the Snapshot: what failed, in words, and what to do.
Pure functions."""

import statistics
from typing import Optional, Sequence

from ...model import ProbeSample
from . import aclcodes
from .config import MIN_BASELINE_RUNS
from .outcome import ProbeOutcome
from .protocol import CRASH, DEVICE_ABNORMAL, FAILED, OK, TIMEOUT, WRONG_DATA, WRONG_RESULT

# What to do about a failure that has no ACL error code, by its reason.
ACTIONS = {
    TIMEOUT: "The device did not answer within the probe's deadline: it may be hung or in reset. Check its "
             "health and dmesg; a hung chip usually needs a reset once its workloads are drained.",
    CRASH: "The probe process died inside the runtime: the driver or the device is in a bad state. Check "
           "dmesg and the chip's health, and probe again.",
    WRONG_DATA: "Data copied to the device and back came back changed: device memory or the PCIe/DMA path "
                "corrupts data, so results computed on this chip are suspect. Check its ECC counters, drain "
                "its workloads and plan a replacement.",
    WRONG_RESULT: "The chip computed a wrong result: its AI Cores may be faulty, so results computed on it are "
                  "suspect. Drain its workloads and report it to support with the probe's output.",
    DEVICE_ABNORMAL: "The runtime itself marks the device ABNORMAL. Check its health and dmesg, drain its "
                     "workloads and reset the chip.",
}
GENERIC_ACTION = "Check the chip's health and dmesg, and probe again."
COMPUTE_STAGE = "compute"  # acl_probe.py's stage that runs the Add on the AI Core


def probe_sample(outcome: ProbeOutcome, started: float, kind: str, device_id: int, first_run: bool,
                 baseline: Sequence[float]) -> ProbeSample:
    """`baseline`: durations of the chip's earlier warm successful probes, oldest first."""
    code = outcome.error_code
    if code is None and outcome.state == FAILED:
        code = aclcodes.find_code(outcome.message or "")  # torch_npu prints the code inside its message
    return ProbeSample(
        state=outcome.state,
        time=started,
        kind=kind,
        device_id=device_id,
        first_run=first_run if outcome.state in (OK, FAILED) else None,
        duration_seconds=round(sum(outcome.stage_seconds.values()), 6) if outcome.stage_seconds else None,
        baseline_seconds=baseline_seconds(baseline),
        stage_seconds=dict(outcome.stage_seconds),
        failed_stage=outcome.failed_stage if outcome.state == FAILED else None,
        error_code=code,
        error_name=None if code is None else aclcodes.describe(code).name,
        detail=_detail(outcome, code),
        action=_action(outcome, code),
    )


def baseline_seconds(durations: Sequence[float]) -> Optional[float]:
    """The median of the durations, once there are enough of them to mean something."""
    if len(durations) < MIN_BASELINE_RUNS:
        return None
    return round(statistics.median(durations), 6)


def _detail(outcome: ProbeOutcome, code: Optional[int]) -> Optional[str]:
    message = outcome.message
    if code is None or outcome.state != FAILED:
        return message
    entry = aclcodes.describe(code)
    described = "{} ({}: {})".format(code, entry.name, entry.meaning)
    if message and str(code) in message:
        return message.replace(str(code), described, 1)
    return "{}: {}".format(message, described) if message else described


def _action(outcome: ProbeOutcome, code: Optional[int]) -> Optional[str]:
    if outcome.state != FAILED:
        return None
    # In the compute step, after the copies and an empty stream passed, "not finished in time" is the AI Core's.
    if outcome.failed_stage == COMPUTE_STAGE and (code in aclcodes.TIMEOUT_CODES
                                                  or (code is None and outcome.reason == TIMEOUT)):
        return aclcodes.AICORE_HANG_ACTION
    if code is not None:
        return aclcodes.describe(code).action
    return ACTIONS.get(outcome.reason or "", GENERIC_ACTION)
