"""The diag child: `python -m npumon.diag.child --device N --level 2|3 [options]`, the workloads of one chip.

Its own process for the probe's reasons: one acl.init per process, and a hung AI Core blocks every
synchronous call, so `npumon diag` kills this process's group at the deadline. Each item is announced on
stderr before it starts; one JSON line goes to stdout at the end (protocol.py).
"""

import argparse
import json
import sys

from ..sources.probe import opmodel
from .protocol import ITEM_START, LEVEL_ITEMS, P2P, SCHEMA, UNAVAILABLE
from .workloads import ItemFailed, ItemUnavailable, Operators, Session, operator_specs, run_item


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(prog="python -m npumon.diag.child",
                                     description="Run the diag workloads on one NPU chip; print one JSON line.")
    parser.add_argument("--device", type=int, required=True, help="logical device id (/dev/davinciN)")
    parser.add_argument("--level", type=int, choices=sorted(LEVEL_ITEMS), required=True)
    parser.add_argument("--items", help="comma-separated items to run (default: every item of the level)")
    parser.add_argument("--peer", type=int, help="level 3: the logical id of the chip to copy to over HCCS")
    parser.add_argument("--copy-bytes", type=int, default=16 * 1048576)
    parser.add_argument("--hbm-bytes", type=int, default=256 * 1048576)
    parser.add_argument("--matmul-size", type=int, default=4096)
    parser.add_argument("--item-seconds", type=float, default=5.0, help="device time of each measurement")
    parser.add_argument("--sustained-seconds", type=float, default=60.0, help="device time of each sustained load")
    parser.add_argument("--sync-timeout-ms", type=int, default=30000)
    parser.add_argument("--op-model-dir", help="directory of the MatMul single-operator models (no building)")
    opmodel.add_arguments(parser)
    options = parser.parse_args(argv)
    items = LEVEL_ITEMS[options.level]
    options.items = items if options.items is None else tuple(options.items.split(","))
    unknown = [item for item in options.items if item not in items]
    if unknown:
        parser.error("items not in level {}: {}".format(options.level, ", ".join(unknown)))
    options.op_settings = opmodel.settings_from_arguments(parser, options)
    return options


def run(options, acl, announce):
    """{"schema", "device", "items": {item: result}, "error"}: every item, or why none could run."""
    report = {"schema": SCHEMA, "device": options.device, "items": {}, "error": None}
    try:
        operators = Operators(operator_specs(options.items, options.matmul_size), options.op_settings,
                              options.op_model_dir)
        session = Session(acl, options.device, options.sync_timeout_ms, operators)
    except (ItemFailed, ItemUnavailable) as exc:
        report["error"] = "device {}: {}".format(options.device, exc)
        return report
    except Exception as exc:  # noqa: BLE001 - a pyACL without a call the session needs (events on an old one)
        report["error"] = "device {}: this pyACL cannot run the diag: {}: {}".format(options.device,
                                                                                  type(exc).__name__, exc)
        return report
    try:
        for item in options.items:
            if item == P2P and options.peer is None:
                report["items"][item] = {"state": UNAVAILABLE, "message": "no chip reachable over HCCS"}
                continue
            announce(item)
            report["items"][item] = run_item(item, session, options)
    finally:
        session.close()
    return report


def _announce(item):
    sys.stderr.write(ITEM_START + item + "\n")
    sys.stderr.flush()


def main(argv=None):
    options = parse_arguments(argv)
    try:
        import acl  # noqa: the runtime this child was started with (CANN's pyACL, or a simulator's)
    except ImportError as exc:
        report = {"schema": SCHEMA, "device": options.device, "items": {},
                  "error": "pyACL is not importable: {}".format(exc)}
    else:
        report = run(options, acl, _announce)
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
