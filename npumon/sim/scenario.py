"""Scenario files: find them, read the YAML, check every key, and normalize them to plain JSON data.

A scenario names its default product, how the simulated npu-smi behaves (normal, hang, garbage,
unsupported) and how fast it answers (`latency_scale` times real npu-smi's speed, see latency.py, plus a
fixed `delay_seconds`), the chips' values over time (defaults for every chip plus per-device overrides), the
host's values and the serving queue depth. The value language is documented in values.py; the
built-in scenarios in scenarios/*.yaml show every feature.

Every mistake raises ScenarioError with one line naming the file, the line and the key.
"""

import math
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import yaml

from ..config.yamlparse import compose
from .kmsg import check_entries as check_kmsg
from .products import PRODUCTS
from .serving import DEFAULTS as SERVING_DEFAULTS
from .serving import ENGINES as SERVING_ENGINES
from .pyacl import AICORE_FAULTS, CORRUPTIBLE_CALLS, DEFAULT_ACL_RUNTIME, FAULT_CALLS, PYACL_KINDS, RT_DEVICE_STATUS, RUNTIME_VIEW_KEYS
from .values import CHIP_FIELDS, DIAG, ERRORS, HOST_FIELDS, NUMBER, PROBE, PROCESSES, TEXT, TEXT_CHOICES

SCENARIO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scenarios")
BEHAVIOURS = ("normal", "hang", "garbage", "unsupported")
_RAMP_KEYS = ("start", "per_minute", "wobble", "period_seconds", "min", "max")
_TOP_KEYS = ("description", "product", "behaviour", "delay_seconds", "latency_scale", "garbage",
             "serving_queue_depth", "serving", "chips", "host", "acl_runtime", "kmsg", "pods")
_POD_KEYS = ("namespace", "name", "container", "devices")
# Kubernetes names (RFC 1123): a pod's is a DNS subdomain, a namespace's and a container's a DNS label
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_K8S_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PROBE_KEYS = ("fail", "error_code", "hang", "crash", "corrupt", "device_status", "slow", "delay_seconds", "aicore")
_DIAG_KEYS = ("hbm_errors", "matmul_wrong_element", "aicore_hang", "throttle_after_seconds", "throttle_clock_ratio",
              "p2p_fail")
_GARBAGE_KEYS = ("table_keep_fraction", "query_keep_fraction")
DEFAULT_GARBAGE = {"table_keep_fraction": 0.6, "query_keep_fraction": 0.5}


# what /proc/<pid>/stat may show for a simulated NPU process: running, sleeping, uninterruptible sleep
PROCESS_STATES = ("R", "S", "D")


class ScenarioError(ValueError):
    """An unknown scenario or a bad scenario file; the message is one line with file, line and key."""


def list_scenarios() -> List[str]:
    """The names of the built-in scenarios."""
    return sorted(name[:-5] for name in os.listdir(SCENARIO_DIR) if name.endswith(".yaml"))


def scenario_path(name_or_path: str) -> str:
    """A built-in scenario's file, or the given path when it names a YAML file."""
    if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        if not os.path.isfile(name_or_path):
            raise ScenarioError("scenario file {} does not exist".format(name_or_path))
        return name_or_path
    path = os.path.join(SCENARIO_DIR, name_or_path + ".yaml")
    if not os.path.isfile(path):
        raise ScenarioError("unknown scenario {!r}; built-in scenarios: {}".format(
            name_or_path, ", ".join(list_scenarios())))
    return path


def load_scenario(name_or_path: str) -> Dict[str, Any]:
    """Read and check a scenario; returns its normalized, JSON-serializable form."""
    path = scenario_path(name_or_path)
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except OSError as exc:
        raise ScenarioError("{}: cannot read: {}".format(path, exc.strerror or exc)) from None
    return _Checker(path).scenario(text, os.path.splitext(os.path.basename(path))[0])


class _Where:
    """A YAML value with the line it starts on, so that errors can point at it."""

    def __init__(self, value: Any, line: int):
        self.value = value
        self.line = line


class _Checker:
    def __init__(self, path: str):
        self.path = path

    def fail(self, where: Optional[_Where], key: str, message: str) -> None:
        line = "" if where is None else ":{}".format(where.line)
        raise ScenarioError("{}{}: {}: {}".format(self.path, line, key, message))

    # -- YAML to located values -----------------------------------------------------------------------

    def parse(self, text: str) -> _Where:
        try:
            node = compose(text)  # libyaml where PyYAML has it: every simulation parses its scenario
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = "" if mark is None else ":{}".format(mark.line + 1)
            raise ScenarioError("{}{}: not valid YAML: {}".format(self.path, line, exc.problem or exc)) from None
        if node is None:
            raise ScenarioError("{}: the file is empty".format(self.path))
        return self._located(node, yaml.constructor.SafeConstructor())

    def _located(self, node: yaml.Node, constructor: yaml.constructor.SafeConstructor) -> _Where:
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            mapping = {}
            for key_node, value_node in node.value:
                key = constructor.construct_object(key_node, deep=True)
                mapping[key] = self._located(value_node, constructor)
            return _Where(mapping, line)
        if isinstance(node, yaml.SequenceNode):
            return _Where([self._located(item, constructor) for item in node.value], line)
        return _Where(constructor.construct_object(node, deep=True), line)

    # -- the scenario -----------------------------------------------------------------------------------

    def scenario(self, text: str, name: str) -> Dict[str, Any]:
        top = self.mapping(self.parse(text), "scenario", _TOP_KEYS)
        if "product" not in top:
            self.fail(None, "product", "missing: every scenario names its default product ({})".format(
                ", ".join(sorted(PRODUCTS))))
        product = self.text(top["product"], "product")
        if product not in PRODUCTS:
            self.fail(top["product"], "product", "unknown product {!r}; known: {}".format(
                product, ", ".join(sorted(PRODUCTS))))
        behaviour = self.text(top["behaviour"], "behaviour") if "behaviour" in top else "normal"
        if behaviour not in BEHAVIOURS:
            self.fail(top["behaviour"], "behaviour", "must be one of {}".format(", ".join(BEHAVIOURS)))
        garbage = dict(DEFAULT_GARBAGE)
        if "garbage" in top:
            for key, where in self.mapping(top["garbage"], "garbage", _GARBAGE_KEYS).items():
                garbage[key] = self.number(where, "garbage." + key, low=0.0, high=1.0)
        chips = self.mapping(top["chips"], "chips", ("default", "overrides")) if "chips" in top else {}
        return {
            "name": name,
            "description": self.text(top["description"], "description") if "description" in top else "",
            "product": product,
            "behaviour": behaviour,
            "delay_seconds": self.number(top["delay_seconds"], "delay_seconds", low=0.0)
            if "delay_seconds" in top else 0.0,
            # times the product's own npu-smi speed (sim/latency.py); 0 answers at once
            "latency_scale": self.number(top["latency_scale"], "latency_scale", low=0.0)
            if "latency_scale" in top else 1.0,
            "garbage": garbage,
            "serving_queue_depth": self.expression(top["serving_queue_depth"], "serving_queue_depth")
            if "serving_queue_depth" in top else None,
            # the inference server's own figures besides its queue (sim/serving.py)
            "serving": self.serving(top["serving"]) if "serving" in top else {},
            "chips": {
                "default": self.chip_values(chips["default"], "chips.default") if "default" in chips else {},
                "overrides": self.overrides(chips["overrides"]) if "overrides" in chips else [],
            },
            "host": self.host(top["host"]) if "host" in top else {},
            "acl_runtime": self.acl_runtime(top["acl_runtime"]) if "acl_runtime" in top else dict(DEFAULT_ACL_RUNTIME),
            # the kernel log's driver lines over time (sim/kmsg.py)
            "kmsg": check_kmsg(self, top["kmsg"]) if "kmsg" in top else [],
            # the pods the fake kubelet lists on the chips (sim/kubelet.py); None: sim/cluster.py's default pods
            "pods": self.pods(top["pods"]) if "pods" in top else None,
        }

    def serving(self, where: _Where) -> Dict[str, Any]:
        serving = {}
        for name, item in self.mapping(where, "serving", tuple(SERVING_DEFAULTS)).items():
            if name == "engine":
                serving[name] = self.text(item, "serving.engine")
                if serving[name] not in SERVING_ENGINES:
                    self.fail(item, "serving.engine", "must be one of {}".format(", ".join(SERVING_ENGINES)))
            else:
                serving[name] = self.number(item, "serving." + name, low=0.0)
        return serving

    def pods(self, where: _Where) -> List[Dict[str, Any]]:
        result = []
        for index, item in enumerate(self.sequence(where, "pods")):
            key = "pods[{}]".format(index)
            values = self.mapping(item, key, _POD_KEYS)
            for required in ("name", "devices"):
                if required not in values:
                    self.fail(item, key + "." + required, "missing: every pod has a name and the devices it holds")
            pod = {"namespace": self.text(values["namespace"], key + ".namespace") if "namespace" in values
                   else "default",
                   "name": self.text(values["name"], key + ".name")}
            pod["container"] = self.text(values["container"], key + ".container") if "container" in values \
                else pod["name"]
            for field, pattern in (("namespace", _K8S_LABEL), ("name", _K8S_NAME), ("container", _K8S_LABEL)):
                if not pattern.match(pod[field]):
                    self.fail(values.get(field, item), "{}.{}".format(key, field),
                              "{!r} is not a Kubernetes name (lower case letters, digits and '-')".format(pod[field]))
            pod["devices"] = [self.integer(device, key + ".devices", low=0)
                              for device in self.sequence(values["devices"], key + ".devices")]
            result.append(pod)
        return result

    def overrides(self, where: _Where) -> List[Dict[str, Any]]:
        result = []
        for index, item in enumerate(self.sequence(where, "chips.overrides")):
            key = "chips.overrides[{}]".format(index)
            values = self.mapping(item, key, ("devices",) + tuple(CHIP_FIELDS))
            if "devices" not in values:
                self.fail(item, key + ".devices", "missing: list the logical device ids this override applies to")
            devices = [self.integer(device, key + ".devices", low=0)
                       for device in self.sequence(values.pop("devices"), key + ".devices")]
            result.append({"devices": devices, "values": self.chip_values(_Where(values, item.line), key)})
        return result

    def chip_values(self, where: _Where, key: str) -> Dict[str, Any]:
        values = {}
        for name, item in self.mapping(where, key, tuple(CHIP_FIELDS)).items():
            kind = CHIP_FIELDS[name][0]
            field_key = "{}.{}".format(key, name)
            if kind == NUMBER:
                values[name] = self.expression(item, field_key)
            elif kind == TEXT:
                values[name] = self.choice(item, field_key, TEXT_CHOICES[name])
            elif kind == ERRORS:
                values[name] = self.errors(item, field_key)
            elif kind == PROCESSES:
                values[name] = self.processes(item, field_key)
            elif kind == PROBE:
                values[name] = self.probe(item, field_key)
            elif kind == DIAG:
                values[name] = self.diag(item, field_key)
        return values

    def host(self, where: _Where) -> Dict[str, Any]:
        host = {}
        for name, item in self.mapping(where, "host", tuple(HOST_FIELDS)).items():
            kind, _ = HOST_FIELDS[name]
            key = "host." + name
            if kind == "text":
                host[name] = self.text(item, key)
            elif kind == "integer":
                host[name] = self.integer(item, key, low=0)
            elif kind == "ratios":
                items = item.value if isinstance(item.value, list) else [item]
                host[name] = [self.expression(ratio, key) for ratio in items]
            elif kind == "paths":
                host[name] = [self.path_name(path, key) for path in self.sequence(item, key)]
            else:
                host[name] = [self.link(link, "{}[{}]".format(key, index))
                              for index, link in enumerate(self.sequence(item, key))]
        if "numa_nodes" in host and host["numa_nodes"] < 1:
            self.fail(where.value["numa_nodes"], "host.numa_nodes", "must be at least 1")
        ratios = host.get("cpu_busy_ratio", [])
        nodes = host.get("numa_nodes", HOST_FIELDS["numa_nodes"][1])
        if len(ratios) not in (0, 1, nodes):
            self.fail(where.value["cpu_busy_ratio"], "host.cpu_busy_ratio",
                      "give one ratio for all NUMA nodes or one per node ({} nodes)".format(nodes))
        both = [path for path in host.get("inaccessible_device_files", [])
                if path in host.get("missing_device_files", [])]
        if both:
            self.fail(where.value["inaccessible_device_files"], "host.inaccessible_device_files",
                      "{} is also in missing_device_files: a file is either missing or there".format(both[0]))
        return host

    # -- single values ----------------------------------------------------------------------------------

    def mapping(self, where: _Where, key: str, allowed: Tuple[str, ...]) -> Dict[str, _Where]:
        if not isinstance(where.value, dict):
            self.fail(where, key, "expected a mapping of keys to values")
        for name in where.value:
            if name not in allowed:
                self.fail(where.value[name], "{}.{}".format(key, name),
                          "unknown key; known keys: {}".format(", ".join(allowed)))
        return dict(where.value)

    def sequence(self, where: _Where, key: str) -> List[_Where]:
        if not isinstance(where.value, list):
            self.fail(where, key, "expected a list")
        return where.value

    def text(self, where: _Where, key: str) -> str:
        if not isinstance(where.value, str):
            self.fail(where, key, "expected text, got {!r}".format(where.value))
        return where.value

    def number(self, where: _Where, key: str, low: Optional[float] = None, high: Optional[float] = None) -> float:
        value = where.value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(where, key, "expected a number, got {!r}".format(value))
        if (low is not None and value < low) or (high is not None and value > high):
            self.fail(where, key, "must be within [{}, {}], got {}".format(
                "-inf" if low is None else low, "inf" if high is None else high, value))
        return value

    def integer(self, where: _Where, key: str, low: int) -> int:
        if isinstance(where.value, bool) or not isinstance(where.value, int) or where.value < low:
            self.fail(where, key, "expected a whole number >= {}, got {!r}".format(low, where.value))
        return where.value

    def path_name(self, where: _Where, key: str) -> str:
        path = self.text(where, key)
        if not path.startswith("/"):
            self.fail(where, key, "expected an absolute path such as /dev/devmm_svm, got {!r}".format(path))
        return path

    def expression(self, where: _Where, key: str, low: Optional[float] = None) -> Any:
        """A number, a ramp/wobble mapping, or steps of numbers. A number or step below `low` is refused; a
        ramp may pass it over time (its user clamps it)."""
        if not isinstance(where.value, dict):
            return self.number(where, key, low=low)
        if "steps" in where.value:
            return {"steps": self.steps(where, key, lambda item, step_key: self.number(item, step_key, low=low))}
        ramp = self.mapping(where, key, _RAMP_KEYS)
        result = {name: self.number(item, "{}.{}".format(key, name)) for name, item in ramp.items()}
        if result.get("wobble") and result.get("period_seconds", 1.0) <= 0:
            self.fail(ramp["period_seconds"], key + ".period_seconds", "must be greater than 0")
        if "min" in result and "max" in result and result["min"] > result["max"]:
            self.fail(ramp["min"], key + ".min", "is greater than max")
        return result

    def choice(self, where: _Where, key: str, choices: Tuple[str, ...]) -> Any:
        """One of `choices` (e.g. a health state), or steps of them."""
        def state(item: _Where, state_key: str) -> str:
            if item.value not in choices:
                self.fail(item, state_key, "must be one of {}".format(", ".join(choices)))
            return item.value

        if isinstance(where.value, dict):
            return {"steps": self.steps(where, key, state)}
        return state(where, key)

    def steps(self, where: _Where, key: str, check_value) -> List[List[Any]]:
        """`steps: {0: OK, 300: Alarm}` or `steps: [[0, OK], [300, Alarm]]` -> sorted [[time, value], ...]."""
        self.mapping(where, key, ("steps",))
        steps = where.value["steps"]
        step_key = key + ".steps"
        if isinstance(steps.value, dict):
            pairs = [(_Where(at, item.line), item) for at, item in steps.value.items()]
        else:
            pairs = []
            for item in self.sequence(steps, step_key):
                if not isinstance(item.value, list) or len(item.value) != 2:
                    self.fail(item, step_key, "each step is [seconds, value]")
                pairs.append((item.value[0], item.value[1]))
        if not pairs:
            self.fail(steps, step_key, "needs at least one step")
        return sorted(([self.number(at, step_key, low=0.0), check_value(value, step_key)] for at, value in pairs),
                      key=lambda pair: pair[0])

    def errors(self, where: _Where, key: str) -> List[Dict[str, str]]:
        result = []
        for index, item in enumerate(self.sequence(where, key)):
            item_key = "{}[{}]".format(key, index)
            error = self.mapping(item, item_key, ("code", "information"))
            for name in ("code", "information"):
                if name not in error:
                    self.fail(item, "{}.{}".format(item_key, name), "missing")
            code = error["code"]
            if not isinstance(code.value, str) or not _is_hex(code.value):
                self.fail(code, item_key + ".code", "expected a quoted hex error code such as \"80E01801\", got {!r}"
                          .format(code.value))
            result.append({"code": code.value.upper(), "information": self.text(error["information"],
                                                                                 item_key + ".information")})
        return result

    def processes(self, where: _Where, key: str) -> List[Dict[str, Any]]:
        result = []
        for index, item in enumerate(self.sequence(where, key)):
            item_key = "{}[{}]".format(key, index)
            process = self.mapping(item, item_key, ("name", "memory_mb", "memory_percent", "pid", "cpu_percent",
                                                    "state", "environment"))
            if "name" not in process:
                self.fail(item, item_key + ".name", "missing")
            if ("memory_mb" in process) == ("memory_percent" in process):
                self.fail(item, item_key, "give the process memory as either memory_mb or memory_percent")
            entry: Dict[str, Any] = {"name": self.text(process["name"], item_key + ".name")}
            if "memory_mb" in process:
                entry["memory_mb"] = self.integer(process["memory_mb"], item_key + ".memory_mb", low=0)
            else:
                # a constant, or a ramp for a process whose memory grows (the hbm-leak scenario)
                memory = process["memory_percent"]
                entry["memory_percent"] = (
                    self.expression(memory, item_key + ".memory_percent") if isinstance(memory.value, dict)
                    else self.number(memory, item_key + ".memory_percent", low=0.0, high=100.0))
            if "pid" in process:
                entry["pid"] = self.integer(process["pid"], item_key + ".pid", low=1)
            # its CPU use (percent of one CPU) and its state in /proc/<pid>/stat (sim/procs.py)
            if "cpu_percent" in process:
                entry["cpu_percent"] = self.expression(process["cpu_percent"], item_key + ".cpu_percent", low=0.0)
            if "state" in process:
                entry["state"] = self.choice(process["state"], item_key + ".state", PROCESS_STATES)
            if "environment" in process:  # what /proc/<pid>/environ shows (npumon diag -r 1 reads it)
                variables = self.mapping(process["environment"], item_key + ".environment",
                                         tuple(process["environment"].value or ()))
                entry["environment"] = {str(name): str(value.value) for name, value in variables.items()}
            result.append(entry)
        return result

    def link(self, where: _Where, key: str) -> Dict[str, Any]:
        link = self.mapping(where, key, ("device", "current_speed", "current_width"))
        if "device" not in link:
            self.fail(where, key + ".device", "missing: the logical device id whose PCIe link this is")
        entry: Dict[str, Any] = {"device": self.integer(link["device"], key + ".device", low=0)}
        if "current_speed" in link:
            entry["current_speed"] = self.text(link["current_speed"], key + ".current_speed")
        if "current_width" in link:
            entry["current_width"] = self.integer(link["current_width"], key + ".current_width", low=1)
        return entry

    def probe(self, where: _Where, key: str) -> Dict[str, Any]:
        """What the simulated pyACL does on this chip's probe (sim/pyacl.py)."""
        plan = self.mapping(where, key, _PROBE_KEYS)
        result: Dict[str, Any] = {}
        for name, choices in (("fail", FAULT_CALLS), ("hang", FAULT_CALLS), ("crash", FAULT_CALLS),
                              ("corrupt", CORRUPTIBLE_CALLS),
                              ("device_status", tuple(RT_DEVICE_STATUS)), ("slow", FAULT_CALLS),
                              ("aicore", AICORE_FAULTS)):
            if name in plan:
                value = self.text(plan[name], "{}.{}".format(key, name))
                if value not in choices:
                    self.fail(plan[name], "{}.{}".format(key, name), "must be one of {}".format(", ".join(choices)))
                result[name] = value
        if ("fail" in plan) != ("error_code" in plan):
            self.fail(where, key + (".error_code" if "fail" in plan else ".fail"),
                      "fail and error_code go together: the call that fails and the ACL error code it returns")
        if "error_code" in plan:
            result["error_code"] = self.acl_code(plan["error_code"], key + ".error_code")
        if ("slow" in plan) != ("delay_seconds" in plan):
            self.fail(where, key + (".delay_seconds" if "slow" in plan else ".slow"),
                      "slow and delay_seconds go together: the call that takes longer and by how many seconds")
        if "delay_seconds" in plan:
            result["delay_seconds"] = self.expression(plan["delay_seconds"], key + ".delay_seconds", low=0.0)
        return result

    def diag(self, where: _Where, key: str) -> Dict[str, Any]:
        """What the simulated device does under `npumon diag` (sim/diag_acl.py)."""
        plan = self.mapping(where, key, _DIAG_KEYS)
        result: Dict[str, Any] = {}
        for name in ("aicore_hang", "p2p_fail"):
            if name in plan:
                if not isinstance(plan[name].value, bool):
                    self.fail(plan[name], "{}.{}".format(key, name), "must be true or false")
                result[name] = plan[name].value
        if "hbm_errors" in plan:
            result["hbm_errors"] = self.integer(plan["hbm_errors"], key + ".hbm_errors", low=0)
        if "matmul_wrong_element" in plan:
            cell = plan["matmul_wrong_element"]
            items = self.sequence(cell, key + ".matmul_wrong_element")
            if len(items) != 2:
                self.fail(cell, key + ".matmul_wrong_element", "must be [row, column]")
            result["matmul_wrong_element"] = [self.integer(item, key + ".matmul_wrong_element", low=0)
                                              for item in items]
        if ("throttle_after_seconds" in plan) != ("throttle_clock_ratio" in plan):
            self.fail(where, key, "throttle_after_seconds and throttle_clock_ratio go together")
        if "throttle_after_seconds" in plan:
            result["throttle_after_seconds"] = self.number(plan["throttle_after_seconds"],
                                                           key + ".throttle_after_seconds", low=0.0)
            ratio = self.number(plan["throttle_clock_ratio"], key + ".throttle_clock_ratio", low=0.01)
            if ratio > 1:
                self.fail(plan["throttle_clock_ratio"], key + ".throttle_clock_ratio", "must be at most 1")
            result["throttle_clock_ratio"] = ratio
        return result

    def acl_runtime(self, where: _Where) -> Dict[str, Any]:
        values = self.mapping(where, "acl_runtime", tuple(DEFAULT_ACL_RUNTIME) + RUNTIME_VIEW_KEYS)
        result = dict(DEFAULT_ACL_RUNTIME)
        result.update(self.runtime_view(values))
        for name in ("installed", "operators"):
            if name in values:
                if not isinstance(values[name].value, bool):
                    self.fail(values[name], "acl_runtime." + name, "expected true or false")
                result[name] = values[name].value
        if "init_error_code" in values:
            result["init_error_code"] = self.acl_code(values["init_error_code"], "acl_runtime.init_error_code")
        return result

    def runtime_view(self, values: Dict[str, "_Where"]) -> Dict[str, Any]:
        """What the simulated runtime reports instead of the host's own values (sim/pyacl.py)."""
        result: Dict[str, Any] = {}
        if "pyacl" in values:
            result["pyacl"] = self.text(values["pyacl"], "acl_runtime.pyacl")
            if result["pyacl"] not in PYACL_KINDS:
                self.fail(values["pyacl"], "acl_runtime.pyacl", "must be one of {}".format(", ".join(PYACL_KINDS)))
        if "device_count" in values:
            result["device_count"] = self.integer(values["device_count"], "acl_runtime.device_count", low=0)
        for name in ("soc_name", "driver_version", "runtime_version"):
            if name in values:
                result[name] = self.text(values[name], "acl_runtime." + name)
        if "memory_held_mb" in values:
            held = values["memory_held_mb"]
            if not isinstance(held.value, dict):
                self.fail(held, "acl_runtime.memory_held_mb", "expected a mapping of logical device ids to MiB")
            result["memory_held_mb"] = {}
            for device, item in held.value.items():
                key = "acl_runtime.memory_held_mb.{}".format(device)
                self.integer(_Where(device, item.line), key, low=0)
                result["memory_held_mb"][str(device)] = self.integer(item, key, low=0)
        return result

    def acl_code(self, where: _Where, key: str) -> int:
        code = self.integer(where, key, low=100000)
        if code > 599999:
            self.fail(where, key, "expected a six-digit ACL error code such as 507053, got {}".format(code))
        return code


def _is_hex(text: str) -> bool:
    return 0 < len(text) <= 8 and all(char in "0123456789abcdefABCDEF" for char in text)
