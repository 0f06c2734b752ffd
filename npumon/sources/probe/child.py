"""The probe child: `python -m npumon.sources.probe.child --device N [--device M ...] [options]`, one probe of
each chip, in turn.

It runs in its own process because ACL allows one acl.init per process and a hung device blocks every
synchronous call: the daemon never imports the runtime, and kills this process's group at the deadline.
One process probes several chips (one Python start and one acl.init for all of them, acl_probe.Session):
each chip is announced on stderr (protocol.DEVICE_START), then every stage of its probe before the stage
starts (protocol.STAGE_START); when the chip is done, one JSON line goes to stdout, flushed at once, so that
the chips done before a hang or a crash keep their results:

    {"schema": "npumon.probe/v1", "kind": "acl", "device": 3, "state": "failed",
     "stages": {"init": 0.41, "set_device": 1.2, ...}, "failed_stage": "memcpy", "error_code": 507053,
     "reason": "acl_error", "message": "acl.rt.memcpy (host to device) returned 507053",
     "runtime": {"device_count": {"value": 8, "source": "acl.rt.get_device_count", "status": "ok"}, ...}, ...}

`state` is "ok", "failed" (the device misbehaved) or "unavailable" (the probe cannot judge the device:
no runtime, a setting that does not fit).

A blocked runtime call cannot be interrupted from inside the process, and a hung chip must cost its own
deadline only: with --device-timeout, a watchdog that needs no GIL (faulthandler's C thread) is armed for each
chip and ends the process (a traceback after protocol.WATCHDOG_LINE on stderr, exit status 1) when the chip's
probe outlasts it. With --not-after, a chip whose deadline would pass it is not started: the daemon probes it
at its next round. Written for Python 3.7+, the oldest Python pyACL supports: the
child may run under the Python that CANN was installed for rather than the daemon's.
"""

import argparse
import faulthandler
import json
import sys
import time

from . import acl_probe
from . import opmodel
from . import torch_probe
from .protocol import DEVICE_START, DTYPE_FORMATS, FAILED, KINDS, OK, SCHEMA, UNAVAILABLE
from .stages import StageFailed, Stages, Unavailable

PROBES = {"acl": acl_probe.run, "torch": torch_probe.run}


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(prog="python -m npumon.sources.probe.child", allow_abbrev=False,
                                     description="Probe NPU chips once each and print each result as one JSON "
                                                 "line.")
    parser.add_argument("--device", type=int, action="append", required=True, dest="devices", metavar="N",
                        help="logical device id (/dev/davinciN); repeated: the chips are probed in this order")
    parser.add_argument("--device-timeout", type=float,
                        help="seconds one chip's probe may take before a watchdog ends the process")
    parser.add_argument("--not-after", type=float,
                        help="time.monotonic() (CLOCK_MONOTONIC, the same in every process of the host) that no "
                             "chip's deadline may pass: chips that would are left for the daemon's next round")
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
    parser.add_argument("--compute", action="store_true",
                        help="acl: also run a known-answer Add on the AI Core (compute.py)")
    opmodel.add_arguments(parser)
    parser.add_argument("--matmul-size", type=int, default=64, help="torch: matrix size")
    parser.add_argument("--matmul-tolerance", type=float, default=1e-2, help="torch: rtol and atol")
    options = parser.parse_args(argv)
    if options.device_timeout is not None and not options.device_timeout > 0:
        parser.error("--device-timeout must be greater than 0")
    if options.not_after is not None and options.device_timeout is None:
        parser.error("--not-after needs --device-timeout")
    if options.model and not (options.model_input and options.model_expected):
        parser.error("--model needs --model-input and --model-expected")
    options.op_settings = opmodel.settings_from_arguments(parser, options)
    return options


def probe(options, stages, device=None, session=None, last=True):
    """One probe of `device` (default: the first --device); returns the report (the JSON line's content). Never
    raises for a device or runtime fault. `session` and `last`: see acl_probe.run."""
    device = options.devices[0] if device is None else device
    options = argparse.Namespace(**dict(vars(options), device=device))
    report = {"schema": SCHEMA, "kind": options.kind, "device": device, "state": OK,
              "failed_stage": None, "error_code": None, "reason": None, "message": None}
    runtime = {}  # the runtime's own facts (acl only), kept also when a stage fails
    try:
        if options.kind == "acl":
            report.update(acl_probe.run(options, stages, runtime if options.runtime_facts else None, session, last))
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
    session = acl_probe.Session()
    devices = options.devices
    for index, device in enumerate(devices):
        if options.not_after is not None and time.monotonic() + options.device_timeout > options.not_after:
            break
        sys.stderr.write("{}{}\n".format(DEVICE_START, device))
        sys.stderr.flush()
        if options.device_timeout is not None:
            faulthandler.dump_traceback_later(options.device_timeout, exit=True, file=sys.stderr)
        report = probe(options, Stages(), device, session, last=index == len(devices) - 1)
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()
        faulthandler.cancel_dump_traceback_later()
    acl_probe.close(session)
    return 0


if __name__ == "__main__":
    sys.exit(main())
