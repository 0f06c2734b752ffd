"""Which backend reads the chip values: `collect.backend` (auto | dcmi | npu-smi) turned into a decision.

The npu-smi source and the DCMI source are built from the same decision (one per config and target): with
DCMI in use, an npu-smi query tier whose values DCMI reads (COVERED_QUERIES) is not asked (`Decision.covers`),
and the npu-smi main table stays the primary tier (the chip list, processes and the rules' rhythm). A query
comes back, per query: while the DCMI source is down (its worker hung, crashed, restarting), and for good where
DCMI lacks it -- every chip answered one of its calls "unsupported" (QUERY_METRICS: e.g. the DDR
bandwidth rate, which 910B's library refuses, brings `usages` back). `board` stays on npu-smi either way:
the firmware version has no DCMI call.

auto: DCMI where a library passes the path checks, loads and initialises in a worker, npu-smi otherwise. That
probe runs once, when the sources are built, and its worker is handed to the DCMI source.
"""

import os
import threading
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from .library import DEFAULT_LOCATIONS, find_library
from .worker import Worker, WorkerDown

DCMI, NPU_SMI = "dcmi", "npu-smi"
# npu-smi query -> groups of DCMI metrics (read.METRICS); the query is lacking on DCMI when, on every chip, every
# metric of one of its groups is unsupported (ECC: both memories; the other groups have one metric each).
QUERY_METRICS = {
    # the multi-rate call stands in for four single rates where it answers
    "usages": tuple(("utilization:" + field, "multi_utilization") for field in (
        "aicore_ratio", "vector_ratio", "aicube_ratio")) + tuple(("utilization:" + field,) for field in (
            "aicpu_ratio", "ctrlcpu_ratio", "ddr_bandwidth_ratio")) + (
                ("utilization:hbm_bandwidth_ratio", "hbm"),),  # the HBM answer carries the bandwidth rate
    "power": (("power",),),
    "health": (("health",), ("error_codes",)),
    "ecc": (("ecc:hbm", "ecc:ddr"),),
    "common": (("aicore_freq",),),
    "memory": (("hbm",),),
    "volt": (("voltage",),),
    "identity": (("ids",), ("vdie",), ("chip_info",)),
}
COVERED_QUERIES = frozenset(QUERY_METRICS)


def lacking_queries(unsupported, chips) -> frozenset:
    """The queries DCMI cannot stand in for on these chips, from the (npu, chip, metric) marked unsupported."""
    if not chips:
        return frozenset()
    return frozenset(query for query, groups in QUERY_METRICS.items()
                     if any(all((npu, chip, metric) in unsupported for npu, chip in chips for metric in group)
                            for group in groups))


@dataclass
class Decision:
    backend: str  # DCMI or NPU_SMI: what reads the chip values
    library: Optional[str]  # the checked library path (None: none found or not wanted)
    reason: str  # one line: why this backend
    owner_uid: int = 0
    sticky_dirs: bool = False
    worker: Optional[Worker] = None  # opened by the auto probe; the DCMI source takes it
    opened: Optional[dict] = None  # the open answer (api, versions)
    env: Optional[dict] = None  # what the worker's environment adds (a simulated host's state directory)
    dcmi_up: Optional[bool] = None  # the DCMI source's last poll answered (None: not polled yet)
    lacking: frozenset = frozenset()  # queries DCMI lacks on this host (lacking_queries)

    def covers(self, query: str) -> bool:
        """Whether npu-smi's `query` is left out now: DCMI reads its values (or has not been asked yet)."""
        return (self.backend == DCMI and self.library is not None and query in COVERED_QUERIES
                and self.dcmi_up is not False and query not in self.lacking)

    def take_worker(self) -> Tuple[Optional[Worker], Optional[dict]]:
        worker, opened, self.worker, self.opened = self.worker, self.opened, None, None
        return worker, opened


_lock = threading.Lock()
_latest: Optional[Tuple[Any, Decision]] = None


def simulated_library() -> Tuple[Optional[str], str]:
    """The simulator's libdcmi.so (npumon.sim.dcmi, compiled with the system's C compiler once per source
    version): (its path or None, why not)."""
    try:
        from ...sim.dcmi import FakeDcmiBuildError, build_fake_library
    except ImportError as exc:
        return None, "the simulator has no libdcmi.so ({})".format(exc)
    try:
        return build_fake_library(), ""
    except FakeDcmiBuildError as exc:
        return None, "the simulated libdcmi.so could not be built: {}".format(exc)


def decide(config: Any, target: Any) -> Decision:
    """The decision for this config and target, made once (the two sources' builds share it)."""
    global _latest
    key = (id(config), config.collect.backend, config.dcmi.library, target.simulated, target.sim_state_dir)
    with _lock:
        if _latest is not None and _latest[0] == key:
            return _latest[1]
        decision = _decide(config, target)
        if _latest is not None and _latest[1].worker is not None:
            _latest[1].worker.close()  # an earlier probe's worker nobody took
        _latest = (key, decision)
        return decision


def _decide(config: Any, target: Any) -> Decision:
    wanted = config.collect.backend
    if wanted == NPU_SMI:
        return Decision(NPU_SMI, None, "collect.backend is npu-smi")
    simulated = getattr(target, "simulated", False)
    configured = config.dcmi.library
    env = dict(target.env or {}) if simulated else None  # the simulated library finds its host's state there
    if simulated and configured is None:
        # A simulated host answers through DCMI only when asked to: auto keeps the npu-smi path it always had.
        if wanted == "auto":
            return Decision(NPU_SMI, None, "auto: a simulated host uses npu-smi unless collect.backend is dcmi")
        configured, problem = simulated_library()
        if configured is None:
            return Decision(DCMI, None, problem, env=env)
    # The simulator's library is built by whoever runs it, under a temporary directory.
    owner_uid = os.getuid() if simulated else 0
    locations = () if simulated else DEFAULT_LOCATIONS
    path, problem = find_library(configured, locations, owner_uid=owner_uid, sticky_dirs=simulated)
    if wanted == DCMI:
        return Decision(DCMI, path, problem or "collect.backend is dcmi", owner_uid, simulated, env=env)
    if path is None:
        return Decision(NPU_SMI, None, "auto: " + problem)
    worker = Worker(env=env)
    try:
        reply = worker.request(open_request(path, owner_uid, simulated), config.dcmi.open_timeout_seconds)
    except WorkerDown as exc:
        worker.close()
        return Decision(NPU_SMI, path, "auto: {}: {}".format(path, exc))
    if not reply.get("ok"):
        worker.close()
        return Decision(NPU_SMI, path, "auto: {}: {}".format(path, reply.get("error")))
    return Decision(DCMI, path, "auto: {} initialised ({} API)".format(path, reply.get("api")), owner_uid, simulated,
                    worker, reply, env)


def open_request(path: str, owner_uid: int, sticky_dirs: bool) -> dict:
    return {"op": "open", "library": path, "owner_uid": owner_uid, "sticky_dirs": sticky_dirs}
