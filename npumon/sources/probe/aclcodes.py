"""The ACL error codes that matter for liveness: name, meaning, and what an operator should do.

Names and meanings are CANN's (the aclError reference, hicann/runtime docs/api_docs/aclError.md, and
include/external/acl/error_codes/rt_error_codes.h; collected in shared/reference/acl-probe-fan-power.md
section 4). The code's first digit is its class: 1 = a mistake of the caller or its environment,
2 = resources or a hardware mismatch, 3 = business (queue full or empty), 5 = an internal software or
hardware error; CANN maps codes it does not recognise to 500000.
"""

import re
from typing import NamedTuple, Optional


class AclCode(NamedTuple):
    name: str
    meaning: str
    action: str


_SUPPORT = "Collect the device logs and dmesg and contact Huawei support if it recurs."
_DRAIN = "Drain the chip's workloads, then reset the chip or replace the card."
_PROBE = "This points at the probe or its environment rather than the chip; check the probe settings."
_MODEL = "Rebuild the probe model with atc for this chip's SoC and CANN version, or check probe.model.path."
_OP = ("The operator or its model does not fit this runtime: the compute step reports it as unavailable. Delete "
       "the probe-ops directory under npumon's state directory so that ATC builds the model again, or check that "
       "the CANN toolkit and kernels packages match the runtime.")
_AICORE_TAIL = ("it cannot compute reliably. Look for 80C9800A (AIC Timeout) or 80CB800A (AIV Timeout) in npu-smi "
                "info -t health and for 'aicore' in the device logs, drain the chip's workloads and reset it; if it "
                "recurs after a reset, replace the card.")
_AICORE = ("The chip's AI Cores did not complete (or trapped on) a kernel while its runtime still answered: "
           + _AICORE_TAIL)
_AICPU = "The chip's AI CPU did not complete or trapped on a task. " + _DRAIN + " " + _SUPPORT

ACL_CODES = {
    100000: AclCode("ACL_ERROR_INVALID_PARAM", "an argument was rejected", _PROBE),
    100001: AclCode("ACL_ERROR_UNINITIALIZE", "ACL is not initialised", _PROBE),
    100002: AclCode("ACL_ERROR_REPEAT_INITIALIZE", "ACL initialised twice in one process", _PROBE),
    100003: AclCode("ACL_ERROR_INVALID_FILE", "invalid file", _MODEL),
    100011: AclCode("ACL_ERROR_INVALID_MODEL_ID", "invalid model id", _PROBE),
    100012: AclCode("ACL_ERROR_DESERIALIZE_MODEL", "the model cannot be deserialised", _MODEL),
    100013: AclCode("ACL_ERROR_PARSE_MODEL", "the model cannot be parsed", _MODEL),
    100014: AclCode("ACL_ERROR_READ_MODEL_FAILURE", "the model file cannot be read", _MODEL),
    100020: AclCode("ACL_ERROR_OP_TYPE_NOT_MATCH", "the single operator's type does not match", _OP),
    100021: AclCode("ACL_ERROR_OP_INPUT_NOT_MATCH", "the single operator's inputs do not match", _OP),
    100022: AclCode("ACL_ERROR_OP_OUTPUT_NOT_MATCH", "the single operator's outputs do not match", _OP),
    100023: AclCode("ACL_ERROR_OP_ATTR_NOT_MATCH", "the single operator's attributes do not match", _OP),
    100024: AclCode("ACL_ERROR_OP_NOT_FOUND", "single operator not found", _OP),
    100025: AclCode("ACL_ERROR_OP_LOAD_FAILED", "the single-operator model does not load (built for another "
                    "version?)", _OP),
    100026: AclCode("ACL_ERROR_UNSUPPORTED_DATA_TYPE", "unsupported data type", _OP),
    107000: AclCode("ACL_ERROR_RT_PARAM_INVALID", "the runtime rejected an argument", _PROBE),
    107001: AclCode("ACL_ERROR_RT_INVALID_DEVICEID", "invalid device id",
                    "The runtime does not know this logical device: it may have dropped off the bus, or the "
                    "container or ASCEND_RT_VISIBLE_DEVICES hides it. Compare npu-smi info -m with lspci."),
    107002: AclCode("ACL_ERROR_RT_CONTEXT_NULL", "no current context", _PROBE),
    107019: AclCode("ACL_ERROR_RT_WAIT_TIMEOUT", "a wait timed out", _DRAIN),
    107020: AclCode("ACL_ERROR_RT_TASK_TIMEOUT", "a task timed out", _DRAIN),
    107022: AclCode("ACL_ERROR_RT_DEVICE_TASK_ABORT", "the device's tasks are being aborted",
                    "Something is aborting the device's tasks; probe again once it has finished."),
    200000: AclCode("ACL_ERROR_BAD_ALLOC", "memory allocation failed",
                    "Host or device memory is exhausted: check memory use with npu-smi info and free."),
    207001: AclCode("ACL_ERROR_RT_MEMORY_ALLOCATION", "device memory allocation failed",
                    "Device memory is exhausted: check its use in npu-smi info; a leaking job is a common cause."),
    207004: AclCode("ACL_ERROR_RT_NO_DEVICE", "the device is not available",
                    "The device is gone or in reset: check npu-smi info, lspci and dmesg. " + _DRAIN),
    207006: AclCode("ACL_ERROR_RT_NO_PERMISSION", "no permission",
                    "npumon may not use the device: run it as a member of the device files' group "
                    "(HwHiAiUser), e.g. SupplementaryGroups= in the unit."),
    # CANN spells it DEVIDE in its headers
    207018: AclCode("ACL_ERROR_RT_DEVIDE_OOM", "device memory exhausted",
                    "Device memory is exhausted: check its use in npu-smi info; a leaking job is a common cause."),
    500000: AclCode("ACL_ERROR_INTERNAL_ERROR", "unknown internal error", _SUPPORT),
    500001: AclCode("ACL_ERROR_FAILURE", "internal error", _SUPPORT),
    500002: AclCode("ACL_ERROR_GE_FAILURE", "graph engine error", _SUPPORT),
    500003: AclCode("ACL_ERROR_RT_FAILURE", "runtime error", _SUPPORT),
    500004: AclCode("ACL_ERROR_DRV_FAILURE", "driver error", _SUPPORT),
    500005: AclCode("ACL_ERROR_PROFILING_FAILURE", "profiling error", _SUPPORT),
    507000: AclCode("ACL_ERROR_RT_INTERNAL_ERROR", "runtime internal error", _SUPPORT),
    507010: AclCode("ACL_ERROR_RT_LOST_HEARTBEAT", "the device's task scheduler lost its heartbeat",
                    "The device is unhealthy. " + _DRAIN),
    507011: AclCode("ACL_ERROR_RT_MODEL_EXECUTE", "model execution failed", _DRAIN + " " + _SUPPORT),
    507014: AclCode("ACL_ERROR_RT_AICORE_TIMEOUT", "AI Core execution timed out", _AICORE),
    507015: AclCode("ACL_ERROR_RT_AICORE_EXCEPTION", "AI Core execution exception", _AICORE),
    507016: AclCode("ACL_ERROR_RT_AICORE_TRAP_EXCEPTION", "AI Core trap exception", _AICORE),
    507017: AclCode("ACL_ERROR_RT_AICPU_TIMEOUT", "AI CPU execution timed out", _AICPU),
    507018: AclCode("ACL_ERROR_RT_AICPU_EXCEPTION", "AI CPU execution exception", _AICPU),
    507033: AclCode("ACL_ERROR_RT_DEV_SETUP_ERROR", "the device failed to start",
                    "Seen when the driver and CANN versions do not match: install matching versions "
                    "(driver version.info against the toolkit's), then probe again."),
    507034: AclCode("ACL_ERROR_RT_VECTOR_CORE_TIMEOUT", "vector core execution timed out", _AICORE),
    507035: AclCode("ACL_ERROR_RT_VECTOR_CORE_EXCEPTION", "vector core execution exception", _AICORE),
    507046: AclCode("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", "the stream did not finish within the timeout",
                    "The device did not finish a trivial stream in time: it may be hung. " + _DRAIN),
    507047: AclCode("ACL_ERROR_RT_EVENT_SYNC_TIMEOUT", "the event did not finish within the timeout",
                    "The device did not finish in time: it may be hung. " + _DRAIN),
    507048: AclCode("ACL_ERROR_RT_FFTS_PLUS_TIMEOUT", "an internal task timed out",
                    "The device did not finish a task in time: it may be hung. " + _DRAIN),
    507053: AclCode("ACL_ERROR_RT_DEVICE_MEM_ERROR", "uncorrectable error (UCE) in device memory",
                    "Device memory is faulty: data on this chip is suspect. Check npu-smi info -t ecc. " + _DRAIN),
    507054: AclCode("ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR", "HBM multi-bit ECC error",
                    "HBM is faulty: data on this chip is suspect. Check npu-smi info -t ecc. " + _DRAIN),
    507055: AclCode("ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR", "suspected memory error (UCE), possibly on a peer device",
                    "Check this chip's and its peers' ECC counters (npu-smi info -t ecc). " + _DRAIN),
    507056: AclCode("ACL_ERROR_RT_LINK_ERROR", "the link between two devices is down",
                    "Probe again; if it persists, check the inter-device links (HCCS) and their cabling."),
    507899: AclCode("ACL_ERROR_RT_DRV_INTERNAL_ERROR", "driver internal error", _DRAIN + " " + _SUPPORT),
    507900: AclCode("ACL_ERROR_RT_AICPU_INTERNAL_ERROR", "AI CPU internal error", _DRAIN + " " + _SUPPORT),
    507901: AclCode("ACL_ERROR_RT_SOCKET_CLOSE", "the host-device channel (HDC) is closed",
                    "The host lost its channel to the device. " + _DRAIN),
}

_CLASSES = {
    "1": ("a mistake of the caller or its environment", _PROBE),
    "2": ("a resource or hardware mismatch", "Check the device's memory use and that the software fits the hardware."),
    "3": ("a business error (queue full or empty)", _PROBE),
    "5": ("an internal software or hardware error", _DRAIN + " " + _SUPPORT),
}

# Codes that only say "did not finish in time": in the compute step, after copies and an empty stream passed,
# they mean the AI Core hung (the op timeout of 68 s to 1091 s is far above the probe's sync timeout, so a hung
# kernel shows as 507046, not 507014).
TIMEOUT_CODES = (107019, 107020, 507046, 507047, 507048)
AICORE_HANG_ACTION = ("The AI Core did not finish a tiny Add while copies to and from the chip and an empty stream "
                      "did: " + _AICORE_TAIL)

_SIX_DIGITS = re.compile(r"(?<!\d)([1235]\d{5})(?!\d)")


def describe(code: int) -> AclCode:
    """The code's entry, or a generic one from its class for a code not in the table."""
    known = ACL_CODES.get(code)
    if known is not None:
        return known
    meaning, action = _CLASSES.get(str(code)[:1], ("an unrecognised code", _SUPPORT))
    return AclCode("ACL error {}".format(code), meaning, action)


def find_code(text: str) -> Optional[int]:
    """The first code of the table that appears in `text` (torch_npu prints them inside its messages)."""
    for match in _SIX_DIGITS.finditer(text or ""):
        code = int(match.group(1))
        if code in ACL_CODES:
            return code
    return None
