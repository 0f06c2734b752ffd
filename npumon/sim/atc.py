"""The simulated ATC: `python -m npumon.sim.atc --singleop=op.json --soc_version=SOC --output=DIR`, what the
operator builder (sources/probe/opmodel.py: the probe's compute step, npumon diag) runs under `--simulate` to build
its single-operator models.

It reads the --singleop description as the real ATC does (a list of {"op", "input_desc", "output_desc", "attr"},
each tensor {"format", "shape", "type"}, each attribute {"name", "type": "bool", "value"}: the probe's Add, the
diag's MatMuls), takes a second, and writes one simulated .om per operator, named as CANN names them (index_op_
then dtype_format_shape of each tensor), which the simulated pyACL's acl.op.set_model_dir loads (sim/pyacl.py).
With the scenario's `acl_runtime: {operators: false}` there is no operator library to build from: it fails as a
build for an unknown operator does.
"""

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional

from .pyacl import DEFAULT_ACL_RUNTIME, SIMULATED_OP_KEY
from .state import STATE_ENV, SimStateError, read_state

ATC_LOG = "atc.log"  # in the simulation's state directory: one line per run, "SOC built|failed"
BUILD_SECONDS = 1.0  # one tiny operator; published ATC timings were not found (reference section 3.3)
TYPES = {"float": 0, "float32": 0, "float16": 1, "int32": 3}  # aclDataType
FORMATS = {"ND": 2}  # aclFormat


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="atc", description="The simulated ATC (single-operator builds only).")
    parser.add_argument("--singleop", required=True)
    parser.add_argument("--soc_version", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    print("ATC start working now, please wait for a moment.")
    problem = _build(args.singleop, args.soc_version, args.output)
    _record(args.soc_version, problem)
    if problem:
        print("ATC run failed: {}".format(problem))
        return 1
    print("ATC run success, welcome to the next use.")
    return 0


def _record(soc_version: str, problem: Optional[str]) -> None:
    """One line per run in the simulation's ATC_LOG, so that a test or a user sees how often ATC ran."""
    state_dir = os.environ.get(STATE_ENV)
    if not state_dir or not os.path.isdir(state_dir):
        return
    with open(os.path.join(state_dir, ATC_LOG), "a", encoding="utf-8") as handle:
        handle.write("{} {}\n".format(soc_version, "failed" if problem else "built"))


def _build(description: str, soc_version: str, output: str) -> Optional[str]:
    try:
        runtime = dict(DEFAULT_ACL_RUNTIME, **read_state(os.environ.get(STATE_ENV))["scenario"].get("acl_runtime", {}))
    except SimStateError as exc:
        return "simulated ATC: {}".format(exc)
    try:
        with open(description, encoding="utf-8") as handle:
            ops = json.load(handle)
    except (OSError, ValueError) as exc:
        return "cannot read {}: {}".format(description, exc)
    if not isinstance(ops, list) or not ops:
        return "{} is not a list of operators".format(description)
    time.sleep(BUILD_SECONDS)
    models = {}
    for index, op in enumerate(ops):
        spec = _op_spec(op)
        if isinstance(spec, str):
            return "operator {}: {}".format(index, spec)
        if not runtime["operators"]:
            return "op type {} is not found in the operator library for {} (simulated: acl_runtime.operators is " \
                   "false)".format(spec[SIMULATED_OP_KEY], soc_version)
        spec["soc_version"] = soc_version
        models[_file_name(index, op)] = spec
    os.makedirs(output, exist_ok=True)
    for name, spec in models.items():
        with open(os.path.join(output, name), "w", encoding="utf-8") as handle:
            json.dump(spec, handle)
    return None


def _op_spec(op: Any) -> Any:
    """The simulated model's content, or what is wrong with the description."""
    if not isinstance(op, dict) or not isinstance(op.get("op"), str):
        return "no op type"
    groups = []
    for key in ("input_desc", "output_desc"):
        tensors = op.get(key)
        if not isinstance(tensors, list) or not tensors:
            return "no {}".format(key)
        group = []
        for tensor in tensors:
            if not isinstance(tensor, dict) or tensor.get("type") not in TYPES or tensor.get("format") not in FORMATS \
                    or not isinstance(tensor.get("shape"), list):
                return "a tensor of {} has no supported type, format or shape".format(key)
            group.append([TYPES[tensor["type"]], list(tensor["shape"])])
        groups.append(group)
    attrs = {}
    for attr in op.get("attr", []):
        if not isinstance(attr, dict) or not isinstance(attr.get("name"), str) or attr.get("type") != "bool" \
                or not isinstance(attr.get("value"), bool):
            return "an attribute is not a named bool"
        attrs[attr["name"]] = attr["value"]
    return {SIMULATED_OP_KEY: op["op"], "inputs": groups[0], "outputs": groups[1], "attrs": attrs}


def _file_name(index: int, op: Dict[str, Any]) -> str:
    tensors = op["input_desc"] + op["output_desc"]
    parts = ["{}_{}_{}".format(TYPES[t["type"]], FORMATS[t["format"]], "_".join(str(size) for size in t["shape"]))
             for t in tensors]
    return "{}_{}_{}.om".format(index, op["op"], "_".join(parts))


if __name__ == "__main__":
    sys.exit(main())
