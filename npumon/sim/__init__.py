"""Simulated Ascend hosts: scenarios, products and an npu-smi-compatible executable (npu-smi-sim).

The API lives in npumon.sim.simulation and is re-exported here. It is loaded on first use, so that the
simulator executable (`python -m npumon.sim.npusmi`, started once per npu-smi call) does not pay for
the YAML reader it never needs.
"""

import importlib

_API = {
    "Simulation": "simulation",
    "prepare_simulation": "simulation",
    "list_scenarios": "simulation",
    "list_products": "simulation",
    "describe_scenarios": "simulation",
    "describe_products": "simulation",
    "serving_queue_depth": "simulation",
    "serving_engine": "simulation",
    "serving_metrics": "simulation",
    "set_scenario": "simulation",
    "set_latency_scale": "simulation",
    "ScenarioError": "scenario",
    "simulated_target": "target",
    "simulation_config": "target",
}
__all__ = sorted(_API)


def __getattr__(name):
    if name not in _API:
        raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))
    return getattr(importlib.import_module("." + _API[name], __name__), name)
