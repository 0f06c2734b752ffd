"""Which backend reads the chip values: `collect.backend` (auto | dcmi | npu-smi) turned into a decision.

The npu-smi source and the DCMI source are built from the same decision (one per config and target): with
DCMI in use, an npu-smi query tier whose values DCMI reads (COVERED_QUERIES) is not asked (`Decision.covers`),
and the npu-smi main table stays the primary tier (the chip list, processes and the rules' rhythm). A query
comes back, per query: while the DCMI source is down (its worker hung, crashed, restarting), and for good where
DCMI lacks it -- every chip answered one of its calls "unsupported" (QUERY_METRICS: e.g. the DDR
bandwidth rate, which 910B's library refuses, brings `usages` back). `board` stays on npu-smi either way:
the firmware version has no DCMI call.

auto: DCMI where a library passes the path checks, loads and initialises in a worker, npu-smi otherwise. Nothing
waits for the library: the sources are built at once (only the path checks run then), npu-smi reads every query
while the DCMI source opens the library in its own tier, and the queries DCMI covers move to it after its first
good sweep (`Decision.in_use`). Until then, and whenever it is down again, npu-smi's status names the backend in
use, "npu-smi", with `fallback_reason` (the library not found or refused, init failed, a hang at open). A target
that supplies its own library (Target.dcmi_library: the simulator's) keeps npu-smi under auto unless
`dcmi.library` names a library: then auto treats it as it would on a real host.
"""

import threading
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from .library import DEFAULT_LOCATIONS, find_library
from .worker import Worker

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
    "hccs": (("hccs",),),
    "hccs_bw": (("hccs_bw",),),
    "sio": (("sio",),),
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
    env: Optional[dict] = None  # what the worker's environment adds (the target's env)
    dcmi_up: Optional[bool] = None  # the DCMI source's last poll answered (None: not polled yet)
    lacking: frozenset = frozenset()  # queries DCMI lacks on this host (lacking_queries)
    auto: bool = False  # collect.backend auto: npu-smi until DCMI's first good sweep, and while it is down
    fallback_reason: Optional[str] = None  # auto: why npu-smi reads the chips now (the DCMI source's last error)

    def in_use(self) -> bool:
        """Whether DCMI reads the chip values now. `dcmi`: unless its last poll failed (or before its first);
        auto: only after a poll that answered."""
        if self.backend != DCMI or self.library is None:
            return False
        return self.dcmi_up is True if self.auto else self.dcmi_up is not False

    def covers(self, query: str) -> bool:
        """Whether npu-smi's `query` is left out now: DCMI reads its values (with `dcmi`: or has not been asked
        yet)."""
        return self.in_use() and query in COVERED_QUERIES and query not in self.lacking

    def status_backend(self) -> Tuple[str, Optional[str]]:
        """(the backend named on npu-smi's status, the reason for a fallback to npu-smi or None)."""
        if self.backend == DCMI and not self.auto:
            return DCMI, None  # chosen: the DCMI source's own status says when it is down
        if self.in_use():
            return DCMI, None
        return NPU_SMI, (self.fallback_reason or self.reason) if self.auto else None

    def take_worker(self) -> Tuple[Optional[Worker], Optional[dict]]:
        worker, opened, self.worker, self.opened = self.worker, self.opened, None, None
        return worker, opened


_lock = threading.Lock()
_latest: Optional[Tuple[Any, Decision]] = None


def decide(config: Any, target: Any) -> Decision:
    """The decision for this config and target, made once (the two sources' builds share it)."""
    global _latest
    key = (id(config), config.collect.backend, config.dcmi.library, target)
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
    auto = wanted == "auto"
    own = target.dcmi_library  # None: the driver's standard locations, owned by root
    configured = config.dcmi.library
    env = dict(target.env) if target.env else None  # the worker finds its host there (a simulation's state)
    if own is not None and configured is None:
        # A host with its own library answers through DCMI only when asked to: auto keeps npu-smi.
        if auto:
            return Decision(NPU_SMI, None, "auto: {} uses npu-smi unless collect.backend is dcmi or dcmi.library "
                                           "names a library".format(target.label or "this target"), auto=True)
        configured, problem = own.build()
        if configured is None:
            return Decision(DCMI, None, problem, env=env)
    owner_uid = 0 if own is None else own.owner_uid
    sticky_dirs = own is not None and own.sticky_dirs
    locations = DEFAULT_LOCATIONS if own is None else ()
    path, problem = find_library(configured, locations, owner_uid=owner_uid, sticky_dirs=sticky_dirs)
    if wanted == DCMI:
        return Decision(DCMI, path, problem or "collect.backend is dcmi", owner_uid, sticky_dirs, env=env)
    if path is None:
        return Decision(NPU_SMI, None, "auto: " + problem, auto=True)
    # Not opened here: a library that hangs in dcmi_init must not hold up the daemon's start or a check.
    return Decision(DCMI, path, "auto: {} passed the path checks; npu-smi until it initialises".format(path),
                    owner_uid, sticky_dirs, env=env, auto=True,
                    fallback_reason="auto: {} not initialised yet".format(path))


def open_request(path: str, owner_uid: int, sticky_dirs: bool) -> dict:
    return {"op": "open", "library": path, "owner_uid": owner_uid, "sticky_dirs": sticky_dirs}
