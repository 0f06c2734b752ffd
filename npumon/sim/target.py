"""A simulated host as a Target: the one seam between the simulator and the sources.

Its npu-smi, hccn_tool, libdcmi.so, kernel log, NPU processes' /proc entries and pyACL stand in for the real ones, so the sources run the
same code as on real hardware and differ only in the Target they are handed. npumon's own state (event
history, outbox, caches, cursors) lives with the simulation: simulation_config() gives the config a simulated
host runs with, and every path a source uses comes from that config.
"""

import dataclasses
import functools
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

from ..config.schema import CoreConfig
from ..sources.k8s.config import DEFAULT_SOCKET
from ..sources.target import DcmiLibrary, KernelLog, Target
from .kmsg import KMSG_FILE, write_due
from .own_cpu import IN_PROCESS_CPU
from .procs import write_processes
from .pyacl import SIMULATED_ACL_DIR
from .simulation import Simulation
from .state import STATE_ENV

if TYPE_CHECKING:
    from .cluster import ClusterAddresses

NPUMON_STATE = "npumon-state"  # npumon's own state dir inside a simulation's
HCCN_TOOL_ARGV = [sys.executable, "-m", "npumon.sim.hccn"]  # the simulated hccn_tool (sim/hccn.py)
ATC_ARGV = [sys.executable, "-m", "npumon.sim.atc"]  # the simulated ATC (sim/atc.py)


def simulated_target(sim: Simulation, serving_url: Optional[str] = None,
                     spawn: Optional[Callable] = None, serving_preset: str = "vllm") -> Target:
    """The Target of the simulated host `sim`: `serving_url` its inference server's metrics endpoint (turns the
    serving source on), served as the engine `serving_preset` serves it; `spawn` runs its npu-smi in place of
    sim.spawn (a test's fake-clock simulator)."""
    state_dir = sim.env[STATE_ENV]
    return Target(sim.npu_smi_argv, dict(sim.env), sim.root, serving_url=serving_url, serving_preset=serving_preset,
                  spawn=sim.spawn if spawn is None else spawn, hccn_tool_argv=list(HCCN_TOOL_ARGV),
                  # the simulator's library is built by whoever runs it, under a temporary directory
                  dcmi_library=DcmiLibrary(build_library, owner_uid=os.getuid(), sticky_dirs=True),
                  # its scenario's `kmsg:` lines, written as its clock runs: on in every simulation
                  kernel_log=KernelLog(os.path.join(state_dir, KMSG_FILE), IN_PROCESS_CPU.timed(
                      "kernel log lines", functools.partial(write_due, state_dir))),
                  # the probe's child runs against the simulated pyACL: no real model, no torch
                  acl_dir=SIMULATED_ACL_DIR, atc_argv=list(ATC_ARGV), label="a simulated host",
                  # its NPU processes' /proc/<pid> entries, written for the moment of each read
                  proc_before_read=IN_PROCESS_CPU.timed("/proc entries", functools.partial(write_processes, state_dir)))


def build_library() -> Tuple[Optional[str], str]:
    """The simulator's libdcmi.so (sim/dcmi, compiled with the system's C compiler once per source version):
    (its path or None, why not)."""
    from .dcmi import FakeDcmiBuildError, build_fake_library  # late: only a DCMI backend needs the compiler

    try:
        return build_fake_library(), ""
    except FakeDcmiBuildError as exc:
        return None, "the simulated libdcmi.so could not be built: {}".format(exc)


def simulation_config(config: Any, sim_state_dir: str, cluster: Optional["ClusterAddresses"] = None) -> Any:
    """The config a command runs a simulated host with: its event history, outbox, caches and cursors live
    with the simulation, never in the real host's state_dir (/var/lib/npumon); with a simulated cluster
    (sim/cluster.py) the Kubernetes sink and source talk to its stand-ins, where the config names no others."""
    state_dir = simulation_state_dir(config.state_dir, sim_state_dir)
    if state_dir != config.state_dir:
        config = dataclasses.replace(config, state_dir=state_dir)
    if cluster is None:
        return config
    sink = config.handoff.kubernetes
    sink = dataclasses.replace(sink, kubeconfig=sink.kubeconfig or cluster.kubeconfig,
                               node_name=cluster.node if sink.node_name.startswith("$") else sink.node_name)
    source = config.kubernetes
    if source.socket == DEFAULT_SOCKET:
        source = dataclasses.replace(source, socket=cluster.socket)
    return dataclasses.replace(config, kubernetes=source,
                               handoff=dataclasses.replace(config.handoff, kubernetes=sink))


def simulation_state_dir(state_dir: str, sim_state_dir: str) -> str:
    """npumon's state directory for a simulated host: the simulation's own, unless the config set state_dir
    to another place than the default (that is the user's choice of where)."""
    if os.path.normpath(state_dir) != os.path.normpath(CoreConfig().state_dir):
        return state_dir
    return os.path.join(os.path.abspath(sim_state_dir), NPUMON_STATE)
