"""The probe child: `python -m npumon.sources.probe.child --device N [options]`, one probe of one chip.

It runs in its own process because ACL allows one acl.init per process and a hung device blocks every
synchronous call: the daemon never imports the runtime, and kills this process's group at the deadline.
Every stage is announced on stderr before it starts (protocol.STAGE_START); at the end one JSON line goes
to stdout:

    {"schema": "npumon.probe/v1", "kind": "acl", "device": 3, "state": "failed",
     "stages": {"init": 0.41, "set_device": 1.2, ...}, "failed_stage": "memcpy", "error_code": 507053,
     "reason": "acl_error", "message": "acl.rt.memcpy (host to device) returned 507053",
     "runtime": {"device_count": {"value": 8, "source": "acl.rt.get_device_count", "status": "ok"}, ...}, ...}

`state` is "ok", "failed" (the device misbehaved) or "unavailable" (the probe cannot judge the device:
no runtime, a setting that does not fit). Written for Python 3.7+, the oldest Python pyACL supports: the
child may run under the Python that CANN was installed for rather than the daemon's.
"""

import argparse
import json
import sys

from . import acl_probe
from . import torch_probe
from .protocol import DTYPE_FORMATS, FAILED, KINDS, OK, SCHEMA, UNAVAILABLE
from .stages import StageFailed, Stages, Unavailable

PROBES = {"acl": acl_probe.run, "torch": torch_probe.run}


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(prog="python -m npumon.sources.probe.child",
                                     description="Probe one NPU chip once and print the result as one JSON line.")
    parser.add_argument("--device", type=int, required=True, help="logical device id (/dev/davinciN)")
    parser.add_argument("--kind", choices=KINDS, default="acl")
    parser.add_argument("--copy-bytes", type=int, default=65536, help="size of the copy pattern")
    parser.add_argument("--sync-timeout-ms", type=int, default=5000)
    parser.add_argument("--model", help="a small .om model to execute (acl only)")
    parser.add_argument("--model-input", help="raw input for the model")
    parser.add_argument("--model-expected", help="raw expected output of the model")
    parser.add_argument("--model-dtype", choices=sorted(DTYPE_FORMATS), default="float32")
    parser.add_argument("--model-tolerance", type=float, default=1e-3)
    parser.add_argument("--runtime-facts", action="store_true",
                        help="acl: also report what the runtime says about the device (count, SoC, versions, "
                             "memory, utilisation)")
    parser.add_argument("--matmul-size", type=int, default=64, help="torch: matrix size")
    parser.add_argument("--matmul-tolerance", type=float, default=1e-2, help="torch: rtol and atol")
    options = parser.parse_args(argv)
    if options.model and not (options.model_input and options.model_expected):
        parser.error("--model needs --model-input and --model-expected")
    return options


def probe(options, stages):
    """One probe; returns the report (the JSON line's content). Never raises for a device or runtime fault."""
    report = {"schema": SCHEMA, "kind": options.kind, "device": options.device, "state": OK,
              "failed_stage": None, "error_code": None, "reason": None, "message": None}
    runtime = {}  # the runtime's own facts (acl only), kept also when a stage fails
    try:
        if options.kind == "acl":
            report.update(acl_probe.run(options, stages, runtime if options.runtime_facts else None))
        else:
            report.update(PROBES[options.kind](options, stages))
    except StageFailed as exc:
        report.update(state=FAILED, failed_stage=stages.failed or stages.current, error_code=exc.code,
                      reason=exc.reason, message=str(exc))
    except Unavailable as exc:
        report.update(state=UNAVAILABLE, message=str(exc))
    except Exception as exc:  # noqa: BLE001 - a runtime that differs from the documented one: cannot judge
        report.update(state=UNAVAILABLE, message="probe error in stage {}: {}: {}".format(
            stages.failed or stages.current, type(exc).__name__, exc))
    report["stages"] = stages.seconds
    if runtime:
        report["runtime"] = runtime
    return report


def main(argv=None):
    options = parse_arguments(argv)
    report = probe(options, Stages())
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
