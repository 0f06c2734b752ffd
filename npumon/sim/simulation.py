"""Start a simulated host: the API npumon (`--simulate`) and the tests use.

    sim = prepare_simulation("/tmp/sim", scenario="overheat")
    runner = CommandRunner(sim.npu_smi_argv, timeout_seconds=5, env=sim.env)   # instead of ["npu-smi"]
    reader reads the fake /proc, /sys, /dev and /usr/local/Ascend under sim.root

prepare_simulation checks the scenario, writes the state directory (start time, scenario, product,
time scale) and the fake host tree; from then on the simulator executable needs only the environment
variable in `sim.env`. Scenario time starts at 0 when prepare_simulation returns and runs at
`time_scale` times wall time (0 freezes it).

Every simulated npu-smi call takes as long as real npu-smi would on the product (sim/latency.py), times
`latency_scale` (and the scenario's own `latency_scale`). By default the scale is 1, hardware-like, or the
value of NPUMON_SIM_LATENCY_SCALE when that is set: the test suite sets it to 0 (tests/conftest.py), so only
the tests that ask for realistic latency wait for it. 0 answers at once.

It also writes the simulated libdcmi.so's state file (sim/dcmi/state.py), which set_scenario and
set_latency_scale rewrite: with the library built by npumon.sim.dcmi.build_fake_library and `sim.env`
in the environment, DCMI answers what npu-smi answers.

`sim.spawn` is None: callers run the simulator executable, the same path as real npu-smi. Only a test
run sets NPUMON_SIM_IN_PROCESS=1 (tests/conftest.py); then `sim.spawn` is the in-process simulator
(sim/inprocess.py), for CommandRunner(..., spawn=sim.spawn), which answers alike without a fork per call.
"""

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from . import scenario as scenarios
from . import serving
from .dcmi.faults import clear_faults
from .dcmi.state import write_dcmi_state
from .hostroot import write_host_root, write_process_environments
from .hostspec import host_root_spec
from .kmsg import reset as reset_kmsg
from .knobs import reset_knobs
from .latency import check_scale, scale_from_environment
from .npusmi import HANG_PIDS_FILE
from .procs import reset_processes
from .products import PRODUCTS, get_product
from .scenario import ScenarioError, load_scenario
from .state import STATE_ENV, read_state, scenario_time, update_state, write_state
from .values import (DEFAULT_SERVING_QUEUE_DEPTH, evaluate, host_cpu_busy_at, host_with_defaults,
                     process_environments)

__all__ = ["Simulation", "prepare_simulation", "list_scenarios", "list_products", "describe_scenarios",
           "describe_products", "serving_queue_depth", "serving_engine", "serving_metrics",
           "set_scenario", "set_latency_scale", "ScenarioError"]

HOST_ROOT_DIR = "root"
IN_PROCESS_ENV = "NPUMON_SIM_IN_PROCESS"  # test runs only: "1" answers npu-smi calls in-process


@dataclass(frozen=True)
class Simulation:
    npu_smi_argv: List[str]  # run this instead of ["npu-smi"]
    env: Dict[str, str]  # add these environment variables when running it
    root: str  # host root prefix for the host reader (fake /proc, /sys, /dev, /usr/local/Ascend)
    scenario: str
    product: str
    spawn: Optional[Callable] = None  # CommandRunner's spawn: None runs npu_smi_argv as a subprocess
    latency_scale: float = 1.0  # times real npu-smi's speed (before the scenario's own scale); 0: no latency


def list_scenarios() -> List[str]:
    """The names of the built-in scenarios (a path to a YAML file works wherever a name does)."""
    return scenarios.list_scenarios()


def list_products() -> List[str]:
    """The names of the simulated products."""
    return sorted(PRODUCTS)


def describe_scenarios() -> List[Dict[str, str]]:
    """Every built-in scenario: name, description and product, for `npumon scenarios`."""
    described = []
    for name in list_scenarios():
        checked = load_scenario(name)
        described.append({"name": name, "description": checked.get("description", ""),
                          "product": checked["product"]})
    return described


def describe_products() -> List[Dict[str, str]]:
    """Every simulated product: name and description."""
    return [{"name": name, "description": PRODUCTS[name].description} for name in list_products()]


def prepare_simulation(state_dir: str, scenario: str = "healthy", product: Optional[str] = None,
                       time_scale: float = 1.0, latency_scale: Optional[float] = None) -> Simulation:
    """Create (or reset) a simulated host in `state_dir`.

    `scenario` is a built-in name or a path to a YAML file; `product` overrides the scenario's product.
    `latency_scale` multiplies real npu-smi's time per call (None: NPUMON_SIM_LATENCY_SCALE if set, else 1).
    Raises ScenarioError for an unknown or bad scenario and for an unknown product, ValueError for a bad
    time scale or latency scale.
    """
    checked = load_scenario(scenario)
    product_name = product or checked["product"]
    if product_name not in PRODUCTS:
        raise ScenarioError("unknown product {!r}; known: {}".format(product_name, ", ".join(list_products())))
    if isinstance(time_scale, bool) or not isinstance(time_scale, (int, float)) or not math.isfinite(time_scale) \
            or time_scale < 0:
        raise ValueError("time_scale must be a finite number >= 0, got {!r}".format(time_scale))
    if latency_scale is None:
        latency_scale = scale_from_environment(os.environ)
    latency_scale = 1.0 if latency_scale is None else check_scale(latency_scale)
    state_dir = os.path.abspath(state_dir)
    root = os.path.join(state_dir, HOST_ROOT_DIR)
    host = host_with_defaults(checked["host"])
    write_host_root(root, host_root_spec(get_product(product_name), host, host_cpu_busy_at(host, 0.0)))
    reset_processes(root)  # the NPU processes' /proc entries come as the clock runs (sim/procs.py)
    write_process_environments(root, process_environments(
        checked["chips"], [slot.device_id for slot in get_product(product_name).slots()]))
    try:
        os.unlink(os.path.join(state_dir, HANG_PIDS_FILE))  # from an earlier run of the hang scenario
    except FileNotFoundError:
        pass
    reset_knobs(state_dir)  # the fan back in auto mode, power knobs at their factory settings
    write_state(state_dir, {
        "start_time": time.time(),
        "time_scale": float(time_scale),
        "latency_scale": latency_scale,
        "product": product_name,
        "scenario": checked,
        "host": host,
        "root": root,
    })
    clear_faults(state_dir)  # no DCMI fault from an earlier run
    reset_kmsg(state_dir)  # an empty kernel log; the scenario's lines come as its clock runs (sim/kmsg.py)
    write_dcmi_state(state_dir)  # what the simulated libdcmi.so answers from (sim/dcmi/state.py)
    return Simulation(npu_smi_argv=[sys.executable, "-m", "npumon.sim.npusmi"], env={STATE_ENV: state_dir},
                      root=root, scenario=checked["name"], product=product_name, spawn=_spawn(),
                      latency_scale=latency_scale)


def _spawn() -> Optional[Callable]:
    if os.environ.get(IN_PROCESS_ENV) != "1":
        return None
    from .inprocess import run_in_process

    return run_in_process


def set_scenario(state_dir: str, scenario: str) -> str:
    """Switch a running simulation to another scenario, e.g. make npu-smi hang mid-run and later answer
    again. The product, the fake host tree and the scenario clock stay; every simulator call from now on
    behaves as the new scenario says. Returns the scenario's name; raises ScenarioError for a bad one."""
    checked = load_scenario(scenario)
    state = read_state(os.path.abspath(state_dir))
    state["scenario"] = checked
    update_state(os.path.abspath(state_dir), state)
    write_dcmi_state(state_dir)
    return checked["name"]


def set_latency_scale(state_dir: str, latency_scale: float) -> None:
    """Make a running simulation's npu-smi calls from now on take `latency_scale` times real npu-smi's
    time (0: none), e.g. to give a benchmark hardware-like timing after a fast set-up."""
    scale = check_scale(latency_scale)
    state = read_state(os.path.abspath(state_dir))
    state["latency_scale"] = scale
    update_state(os.path.abspath(state_dir), state)
    write_dcmi_state(state_dir)


def serving_queue_depth(state_dir: str, now: Optional[float] = None) -> float:
    """The simulated inference server's request queue depth at wall time `now` (default: now)."""
    return _queue_depth(read_state(state_dir), time.time() if now is None else now)


def _queue_depth(state: Dict[str, Any], now: float) -> float:
    expression = state["scenario"]["serving_queue_depth"]
    t = scenario_time(state, now)
    return max(0.0, float(evaluate(DEFAULT_SERVING_QUEUE_DEPTH if expression is None else expression, t)))


def serving_engine(state_dir: str) -> str:
    """The engine the simulated inference server imitates (a serving preset's name)."""
    return serving.with_defaults(read_state(state_dir)["scenario"].get("serving", {}))["engine"]


def serving_metrics(state_dir: str, now: Optional[float] = None) -> str:
    """The simulated inference server's /metrics answer at wall time `now` (default: now)."""
    state = read_state(state_dir)
    now = time.time() if now is None else now
    return serving.render(state["scenario"].get("serving", {}), _queue_depth(state, now), scenario_time(state, now))
