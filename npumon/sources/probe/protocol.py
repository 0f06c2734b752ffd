"""What the probe child and the daemon say to each other. Tiny on purpose: the child imports it."""

SCHEMA = "npumon.probe/v1"

# Lines the child writes on stderr around every stage, so that the daemon can tell which stage a killed
# or crashed child was in, and how long the stages before it took:
#     npumon-probe: start memcpy
#     npumon-probe: done memcpy 0.000713
STAGE_START = "npumon-probe: start "
STAGE_DONE = "npumon-probe: done "
# A child that probes several chips in turn says which one the stage lines after it belong to:
#     npumon-probe: device 3
DEVICE_START = "npumon-probe: device "
# The first line faulthandler.dump_traceback_later writes when the child's per-chip watchdog ends it
# ("Timeout (0:00:30)!"): the chip in progress did not answer within probe.timeout_seconds.
WATCHDOG_LINE = "Timeout ("

# The child's verdicts: the device passed, the device failed, or the probe could not judge the device.
OK = "ok"
FAILED = "failed"
UNAVAILABLE = "unavailable"
STATES = (OK, FAILED, UNAVAILABLE)

# Why a failed probe failed (the child's "reason"; the daemon adds "timeout" and "crash").
ACL_ERROR = "acl_error"  # an ACL call returned an error code
WRONG_DATA = "wrong_data"  # data copied to the device and back came back different
WRONG_RESULT = "wrong_result"  # the model or matmul computed a wrong result
DEVICE_ABNORMAL = "device_abnormal"  # the runtime reports the device ABNORMAL
NPU_ERROR = "npu_error"  # torch_npu raised an error (its text may carry an ACL code)
TIMEOUT = "timeout"
CRASH = "crash"

KINDS = ("acl", "torch")

# struct format letters of the data types a probe model's output may have (little-endian, as the NPU
# hosts are: x86_64 and aarch64)
DTYPE_FORMATS = {"float32": "f", "float16": "e", "int32": "i", "int8": "b", "uint8": "B"}
