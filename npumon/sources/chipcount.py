"""The expected-chip-count check (gpud's gpu-counts): a card that drops off the PCI bus or out of npu-smi's
table is a critical finding, also after a daemon restart.

How many chips the host should have is `faults.expected_chips` where configured; else it is learned: the
most chips npu-smi's table has listed, and the most NPUs seen on the PCI bus (sysfs devices with Huawei's
vendor id 0x19e5 and an NPU device id), each kept in `<state_dir>/chip-count.json` so that a restart after
the drop still knows the card was there. A card the kernel still enumerates but npu-smi no longer lists
counts as missing at once, even on the first run (and in `npumon check`). The learned counts only grow:
after removing a card on purpose, delete the file (or set faults.expected_chips).

A chip whose row of the table is there but unreadable is not missing: it counts as listed (npu-smi's own
status says the table is degraded), and its bus id, where the row still shows one, as in the table. Where an
unreadable row shows no bus id, the table cannot be compared with the PCI bus, as when a row prints none.
"""

import dataclasses
import json
import logging
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..model import ChipSample, Snapshot
from ..outputs.families import Families, MetricSpec
from .base import Parts, SingleTierSource, SourceContext, SourceError, SourceSpec

log = logging.getLogger(__name__)

NAME = "chip-count"
STATE_FILE = "chip-count.json"
EXTRA_KEY = "chip_count"  # host.extra: what this source saw
HUAWEI_VENDOR_ID = 0x19E5
# PCI device ids of Ascend NPUs: 0xd801 910 (A1), 0xd802 910B (A2), 0xd806 950 (npu-smi -t board, FORMATS.md
# 4.6), 0xd803 A3 (the driver's ascend_bug_report.sh, hccn/FORMATS.md), 0xd105 (the driver's "Findout
# device" probe line, FAULTS.md 2.3). No 310-family id is in the reference: set faults.expected_chips there.
NPU_DEVICE_IDS = frozenset((0xD801, 0xD802, 0xD803, 0xD806, 0xD105))
PCI_DEVICES = "sys/bus/pci/devices"  # under the target's root
MAX_PCI_DEVICES = 4096


def npu_pci_devices(root: str, known: Optional[Dict[Tuple[str, int], bool]] = None) -> List[str]:
    """The PCI addresses (lower case) under <root>/sys/bus/pci/devices with an NPU's vendor and device id.
    `known`, kept by the caller between calls: whether each entry seen before (its name and inode: a device
    removed and added again is a new entry) is an NPU, so that its vendor and device files are read once."""
    directory = os.path.join(root, PCI_DEVICES)
    try:
        with os.scandir(directory) as listing:
            entries = sorted(((entry.name, entry.inode()) for entry in listing))[:MAX_PCI_DEVICES]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SourceError("{}: {}".format(directory, exc.strerror or exc)) from None
    learnt = {} if known is None else known
    found = []
    for entry in entries:
        npu = learnt.get(entry)
        if npu is None:
            npu = _is_npu(os.path.join(directory, entry[0]))
            if npu is not None:
                learnt[entry] = npu
        if npu:
            found.append(entry[0].lower())
    if known is not None:
        for gone in set(known) - set(entries):
            del known[gone]
    return found


def _is_npu(device_dir: str) -> Optional[bool]:
    """Whether the device's vendor and device ids are an NPU's; None when its files could not be read."""
    vendor = _hex_file(os.path.join(device_dir, "vendor"))
    if vendor is None:
        return None
    if vendor != HUAWEI_VENDOR_ID:
        return False
    device = _hex_file(os.path.join(device_dir, "device"))
    return None if device is None else device in NPU_DEVICE_IDS


def _hex_file(path: str) -> Optional[int]:
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read(32).strip(), 16)
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def judge(expected_chips: Optional[int], listed: Optional[int], expected_pci: int, pci: Sequence[str],
          listed_buses: Optional[Sequence[str]], unreadable: int = 0) -> Dict[str, Any]:
    """The counts and what is missing. `listed` None: npu-smi's table is not known now (its source is
    down: source-down says so); `listed_buses` None: the table gave no bus ids to compare with; `unreadable`:
    how many of the `listed` chips have a row that could not be read. Pure."""
    problems = []
    missing_listed = 0
    if listed is not None and expected_chips is not None and listed < expected_chips:
        missing_listed = expected_chips - listed
        problems.append("npu-smi lists {} of {} chips".format(listed, expected_chips))
    if unreadable:
        problems.append("{} chip row(s) of npu-smi's table unreadable, not missing".format(unreadable))
    missing_pci = max(0, expected_pci - len(pci))
    if missing_pci:
        problems.append("{} of {} NPUs are gone from the PCI bus".format(missing_pci, expected_pci))
    unlisted = [] if listed_buses is None else sorted(set(pci) - set(listed_buses))
    if unlisted:
        problems.append("on the PCI bus but not in npu-smi's table: {}".format(", ".join(unlisted)))
    return {"expected": expected_chips, "listed": listed, "pci_expected": expected_pci, "pci": len(pci),
            "unlisted": unlisted, "missing": max(missing_listed, missing_pci, len(unlisted)),
            "unreadable": unreadable, "problem": "; ".join(problems) or "none"}


class ChipCountSource(SingleTierSource[Dict[str, Any]]):
    name = NAME

    def __init__(self, configured: Optional[int], root: str, state_dir: Optional[str], interval: float,
                 clock, max_age: float):
        """`configured` None: learn the count; `state_dir` None: `npumon check`, nothing saved or read."""
        super().__init__(interval, max_age, clock)
        self.configured = configured
        self.root = root
        self.state_dir = state_dir
        self.learned = self._load()
        self._pci_known: Dict[Tuple[str, int], bool] = {}  # npu_pci_devices' memory of the bus's entries

    def _path(self) -> str:
        return os.path.join(self.state_dir or "", STATE_FILE)

    def _load(self) -> Dict[str, int]:
        if self.state_dir is None:
            return {"chips": 0, "pci": 0}
        try:
            with open(self._path(), encoding="utf-8") as handle:
                data = json.loads(handle.read(4096))
            return {key: int(data.get(key) or 0) for key in ("chips", "pci")}
        except FileNotFoundError:
            return {"chips": 0, "pci": 0}
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("chip-count: %s unreadable (%s); learning the chip count afresh", self._path(), exc)
            return {"chips": 0, "pci": 0}

    def _save(self) -> None:
        if self.state_dir is None:
            return
        temporary = self._path() + ".tmp"
        try:
            os.makedirs(self.state_dir, exist_ok=True)
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(self.learned, handle, sort_keys=True)
            os.replace(temporary, self._path())
        except OSError as exc:
            log.warning("chip-count: cannot save the learned chip count in %s: %s", self._path(), exc.strerror or exc)

    def read(self, chips: Sequence[ChipSample]) -> Dict[str, Any]:
        pci = npu_pci_devices(self.root, self._pci_known)
        learned = {"chips": max(self.learned["chips"], len(chips)), "pci": max(self.learned["pci"], len(pci))}
        if learned != self.learned:
            self.learned = learned
            self._save()
        return {"pci": pci}

    def contribute(self, parts: Parts, now: float) -> Parts:
        value = self.reading.value(now)
        if value is None:
            return parts
        chips = parts.chips
        unreadable = parts.unreadable_chips if chips else ()
        # a chip whose row is unreadable is in the table all the same
        rows = [chip.bus_id for chip in chips] + list(unreadable)
        listed = len(rows) if chips else None  # no table now: npu-smi is down, source-down tells
        buses = [bus_id.lower() for bus_id in rows if bus_id]
        listed_buses = buses if chips and len(buses) == len(rows) else None
        # an NPU on the bus but not in the table has at least one chip the table should list
        unlisted = len(set(value["pci"]) - set(listed_buses)) if listed_buses is not None else 0
        learned_chips = max(self.learned["chips"], len(rows) + unlisted)
        expected = self.configured if self.configured else (learned_chips or None)
        found = judge(expected, listed, self.learned["pci"], value["pci"], listed_buses, len(unreadable))
        host = dataclasses.replace(parts.host, extra=dict(parts.host.extra, **{EXTRA_KEY: found}))
        return dataclasses.replace(parts, host=host)


def host_facts(snapshot: Snapshot) -> Dict[str, Any]:
    found = snapshot.host.extra.get(EXTRA_KEY)
    if not found:
        return dict.fromkeys(("chips_expected", "chips_listed", "npu_pci_devices", "npu_pci_expected",
                              "chips_missing", "chips_unreadable", "chip_count_problem"))
    return {"chips_expected": found["expected"], "chips_listed": found["listed"], "npu_pci_devices": found["pci"],
            "npu_pci_expected": found["pci_expected"], "chips_missing": found["missing"],
            "chips_unreadable": found["unreadable"], "chip_count_problem": found["problem"]}


METRICS = (
    MetricSpec("npumon_chips_expected", (), "NPU chips this host should have (faults.expected_chips, or learned)."),
    MetricSpec("npumon_chips_missing", (), "NPU chips missing from npu-smi's table or the PCI bus."),
    MetricSpec("npumon_chips_unreadable", (),
               "NPU chips whose row of npu-smi's table could not be read (not missing)."),
    MetricSpec("npumon_npu_pci_devices", (), "NPUs on the PCI bus (Huawei vendor id, NPU device ids) in sysfs."),
)


def export(snapshot: Snapshot, out: Families) -> None:
    found = snapshot.host.extra.get(EXTRA_KEY)
    if not found:
        return
    out.add("npumon_chips_expected", found["expected"])
    out.add("npumon_chips_missing", found["missing"])
    out.add("npumon_chips_unreadable", found["unreadable"])
    out.add("npumon_npu_pci_devices", found["pci"])


def build(context: SourceContext) -> Optional[ChipCountSource]:
    config = context.config.faults
    if not config.chip_count or context.config.poll.host_seconds <= 0:
        return None  # it reads the host's sysfs, so it is polled with (and off with) the host facts
    state_dir = None if context.one_pass else context.state_dir
    return ChipCountSource(config.expected_chips or None, context.target.root, state_dir,
                           context.config.poll.host_seconds, context.clock, context.config.max_age_seconds)


SPEC = SourceSpec(NAME, build, host_facts=host_facts, metrics=METRICS, export=export)
