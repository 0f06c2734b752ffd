"""The DCMI source: the chip values npu-smi's query tiers would read, from libdcmi.so in a worker process.

How it fits with the npu-smi source (backend.py decides which is in use): the npu-smi main table stays the
primary tier -- it lists the chips, their processes, and after each of its polls the rules are judged -- and the
npu-smi query tiers that DCMI covers are left out. This source runs one tier, `dcmi`, at the main table's
interval; its contribute() lays its fresh values over the chips the table listed (matched by card id and chip
index, which DCMI and npu-smi number alike). Where the table could not be read at all, the chips DCMI lists
stand in, so a wedged npu-smi does not hide chips that DCMI still reads.

Freshness is the npu-smi source's rule: a value stays until it is older than its allowed age; a sweep that
failed changes nothing; a metric the chip does not support (-8255 ...) is not asked again until restart. A chip
that left DCMI's card list loses its values at once.
"""

import dataclasses
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ...model import ChipSample, SourceStatus
from ..base import Facts, Outcome, Parts, PollRecorder, Section, SourceContext, SourceSpec, Tier, allowed_age
from .backend import DCMI, Decision, decide, lacking_queries, open_request
from .config import DcmiConfig, dcmi_problems
from .metrics import METRICS, export
from .read import QUICK_METRICS
from .worker import Worker, WorkerDown

DCMI_SOURCE = "dcmi"
# the link fields and the metric (read.LINK_METRICS) that reads each: they age at their own tier's interval
LINK_FIELDS = {"hccs": "hccs", "hccs_bandwidth": "hccs_bw", "sio": "sio", "ub": "ub",
               "ub_bandwidth": "ub_bw"}
EXTRA_KEYS = ("aicore_count", "npu_name", "hbm_freq_mhz", "aicore_rated_freq_mhz", "board_id", "slot_id",
              "pcie_vendor_id", "pcie_device_id", "pcie_subvendor_id", "pcie_subdevice_id")
ChipKey = Tuple[int, int]


class DcmiSource:
    name = DCMI_SOURCE

    def __init__(self, decision: Decision, interval: float, max_age: float, timeout_seconds: float,
                 open_timeout_seconds: float, clock=time.time, worker: Optional[Worker] = None,
                 opened: Optional[dict] = None, static_interval: float = 3600.0, quick_pass: bool = False,
                 not_after: Optional[Callable[[], Optional[float]]] = None,
                 link_intervals: Optional[Dict[str, float]] = None):
        self.decision = decision
        # the pass's end (time.monotonic(); `npumon check --timeout`), past which no open or sweep may wait
        self.not_after = not_after or (lambda: None)
        self._ever_up = False  # auto: the source shows a status once DCMI has been in use
        # one quick pass of `npumon check`: health, error codes and ECC only (read.QUICK_METRICS), which fits its
        # --timeout on a 16-chip host where a first full sweep does not
        self.quick_pass = quick_pass
        self.interval = interval
        self.static_interval = static_interval  # ids, die id, board: read again this often (poll.identity_seconds)
        self._static_due = 0.0
        # link metric -> seconds between its reads (0: off), and when it is due next: one call per chip each, and
        # the bandwidth call blocks for its profiling window, so not every sweep
        self.link_intervals = dict(link_intervals or {})
        self._link_due: Dict[str, float] = {}
        self.max_age = max_age
        self.timeout_seconds = timeout_seconds
        self.open_timeout_seconds = open_timeout_seconds
        self.clock = clock
        self.worker = worker or Worker(env=decision.env)
        self._opened = opened
        self._opened_pid = self.worker.pid if opened else None
        self._lock = threading.Lock()
        # (npu, chip) -> field -> (time read, value, read by the static sweep)
        self._values: Dict[ChipKey, Dict[str, Tuple[float, Any, bool]]] = {}
        self._chips: List[ChipKey] = []
        self._chips_time: Optional[float] = None
        self.unsupported: Set[Tuple[int, int, str]] = set()
        self.recorder = PollRecorder(self.name, lambda tier: allowed_age(self.max_age, self.interval), clock)
        self.reinitialisations = 0

    def tiers(self) -> Sequence[Tier]:
        return [Tier(self.name, self.interval, first_run=0.0)]

    def poll(self, tier: str, chips: Sequence[ChipSample] = ()) -> Optional[float]:
        return self.recorder.execute(self.name, self._poll)

    def _poll(self, started: float) -> Outcome:
        error, degraded = self._poll_once(started)
        self.decision.dcmi_up = error is None or degraded
        if self.decision.dcmi_up:
            self._ever_up, self.decision.fallback_reason = True, None
        elif self.decision.auto:
            self.decision.fallback_reason = "auto: DCMI is down: " + error
        with self._lock:
            self.decision.lacking = lacking_queries(self.unsupported, self._chips)
        if error is not None and not degraded:
            return Outcome.failed(error)
        return Outcome(error=error, degraded=degraded)

    def _poll_once(self, started: float) -> Tuple[Optional[str], bool]:
        if self.decision.library is None:
            return "no library: " + self.decision.reason, False
        try:
            if self._opened is None or self._opened_pid != self.worker.pid or not self.worker.running():
                reply = self.worker.request(open_request(self.decision.library, self.decision.owner_uid,
                                                         self.decision.sticky_dirs),
                                            self._within(self.open_timeout_seconds))
                if not reply.get("ok"):  # refused or init failed: asked again next poll
                    return "{}: {}".format(self.decision.library, reply.get("error")), False
                self._opened, self._opened_pid = reply, self.worker.pid
            static = started >= self._static_due and not self.quick_pass
            links = sorted(metric for metric, seconds in self.link_intervals.items()
                           if seconds > 0 and started >= self._link_due.get(metric, 0.0))
            request = {"op": "sweep", "unsupported": sorted(self.unsupported), "static": static, "links": links}
            if self.quick_pass:
                request["only"] = sorted(QUICK_METRICS)
            reply = self.worker.request(request, self._within(self.timeout_seconds))
        except WorkerDown as exc:
            self._opened = None
            return "worker: {}".format(exc), False
        if not reply.get("ok"):
            self._opened = None  # opened again next poll
            return str(reply.get("error")), False
        self.worker.succeeded()
        if static:
            self._static_due = started + self.static_interval
        for metric in links:
            self._link_due[metric] = started + self.link_intervals[metric]
        if reply.get("reinitialised"):
            self.reinitialisations += 1
        self._store(reply, started)
        problems = list(reply.get("problems", [])) + [
            "npu {} chip {}: {}".format(chip["npu"], chip["chip"], problem)
            for chip in reply.get("chips", []) for problem in chip.get("problems", [])]
        if problems:
            more = "" if len(problems) == 1 else " (and {} more)".format(len(problems) - 1)
            return "degraded: {}{}".format(problems[0], more), True
        return None, False

    def _within(self, seconds: float) -> float:
        """`seconds`, cut to what is left of the pass (a hanging library then fails the pass's DCMI part in time)."""
        end = self.not_after()
        return seconds if end is None else max(0.05, min(seconds, end - time.monotonic()))

    def _store(self, reply: Dict[str, Any], when: float) -> None:
        with self._lock:
            for npu, chip, metric in reply.get("unsupported", []):
                self.unsupported.add((int(npu), int(chip), str(metric)))
            keys = []
            for record in reply.get("chips", []):
                key = (int(record["npu"]), int(record["chip"]))
                keys.append(key)
                fields = self._values.setdefault(key, {})
                static = set(record.get("static", []))
                for name, value in record.get("values", {}).items():
                    fields[name] = (when, value, name in static)
            for gone in [key for key in self._values if key not in keys]:
                del self._values[gone]
            self._chips, self._chips_time = keys, when

    # -- reading -----------------------------------------------------------------------------------------

    def fresh_values(self, now: float) -> Dict[ChipKey, Dict[str, Any]]:
        allowed = allowed_age(self.max_age, self.interval)
        static_allowed = allowed_age(self.max_age, self.static_interval)
        link_allowed = {name: allowed_age(self.max_age, self.link_intervals.get(metric, 0.0))
                        for name, metric in LINK_FIELDS.items()}
        with self._lock:
            return {key: {name: value for name, (when, value, static) in fields.items()
                          if now - when <= (static_allowed if static else link_allowed.get(name, allowed))}
                    for key, fields in self._values.items()}

    def contribute(self, parts: Parts, now: float) -> Parts:
        values = self.fresh_values(now)
        if not values:
            return parts
        chips = parts.chips
        if not chips and self._chips_time is not None and now - self._chips_time <= allowed_age(
                self.max_age, self.interval):
            chips = tuple(ChipSample(npu=npu, chip=chip) for npu, chip in self._chips)
        return dataclasses.replace(parts, chips=tuple(
            with_values(chip, values[chip.key]) if chip.key in values else chip for chip in chips))

    def statuses(self, now: float) -> Dict[str, SourceStatus]:
        if self.decision.auto and not self._ever_up:
            return {}  # not in use yet: npu-smi's status says why (fallback_reason)
        return {tier: dataclasses.replace(status, backend=DCMI)
                for tier, status in self.recorder.statuses(now, unpolled=[self.name]).items()}

    def close(self) -> None:
        self.worker.close()


def with_values(chip: ChipSample, values: Dict[str, Any]) -> ChipSample:
    """A new ChipSample: `chip` with DCMI's values laid over it (ECC per memory summed as npu-smi's parser does)."""
    plain: Dict[str, Any] = {}
    extra = dict(chip.extra)
    ecc: Dict[str, Dict[str, Optional[int]]] = {}
    counters: Dict[str, Dict[str, Optional[int]]] = {}
    for name, value in values.items():
        if name == "vector_ratio":
            chip_name = values.get("name") or chip.name or ""
            plain["vectorcore_ratio" if chip_name.startswith("310") else "aivector_ratio"] = value
        elif name.startswith("extra."):
            extra[name[len("extra."):]] = value
        elif name.startswith("ecc."):
            ecc[name[len("ecc."):]] = dict(value)
        elif name.startswith("ecc_counters."):
            counters[name[len("ecc_counters."):]] = dict(value)
        else:
            plain[name] = value
    if ecc:
        plain["ecc"] = ecc
        for field, counter in (("ecc_single_bit_errors", "single"), ("ecc_double_bit_errors", "double"),
                               ("ecc_isolated_pages", "isolated_pages")):
            plain[field] = sum(counts[counter] for counts in ecc.values())
    if counters:
        plain["ecc_counters"] = counters
    if "processes" in plain:
        plain.pop("processes")
    new = dataclasses.replace(chip, extra=extra)
    new.update(plain)
    return new


def build(context: SourceContext) -> Optional[DcmiSource]:
    config = context.config
    decision = decide(config, context.target)
    if decision.backend != DCMI:
        return None
    worker, opened = decision.take_worker()
    return DcmiSource(decision, config.poll.table_seconds, config.max_age_seconds, config.dcmi.timeout_seconds,
                      config.dcmi.open_timeout_seconds, context.clock, worker, opened,
                      static_interval=config.poll.identity_seconds or 3600.0, quick_pass=context.quick_pass,
                      not_after=lambda: context.npu_smi.not_after,
                      link_intervals={"hccs": config.poll.hccs_seconds, "hccs_bw": config.poll.hccs_bw_seconds,
                                      "sio": config.poll.sio_seconds, "ub": config.poll.ub_seconds,
                                      "ub_bw": config.poll.ub_bw_seconds})


def chip_facts(chip: ChipSample, host) -> Facts:
    """DCMI's own values (ChipSample.extra): None where the backend is npu-smi or the chip lacks them."""
    return {"dcmi_" + key: chip.extra.get(key) for key in EXTRA_KEYS}


SPEC = SourceSpec(DCMI_SOURCE, build, section=Section("dcmi", DcmiConfig, dcmi_problems), chip_facts=chip_facts,
                  metrics=METRICS, export=export, lists_chips=True)
