"""The simulated host's kernel log: the Ascend driver's lines a scenario's `kmsg:` entries call for.

    kmsg:
      - {line: heartbeat_lost, devices: [2], at: 0, count: 3, every: 6}
      - {line: fault_event, code: "80E01801", devices: [3], count: 3}

Each entry writes `count` lines per device, the first at scenario second `at`, then one every `every`
seconds (0: all at once). The lines use the driver's real formats (the format strings FAULTS.md §2 cites:
hicann/driver dmc_log.h's "[ascend] [ERROR] [<module>] [<function> <line>] " prefix at KERN_NOTICE, the
kernel's AER line, the device event log's "Event id=0x..."); the numbers in them are invented. They go to
<state_dir>/kmsg as /dev/kmsg records ("<level>,<seq>,<usec>,-;<message>"), which the kmsg source reads as
it reads faults.kmsg_path on a real host. The simulated kernel writes what is due when the source reads
(write_due), so the log follows scenario time on a fake clock too. Bounded: MAX_LINES per entry.
"""

import contextlib
import fcntl
import json
import math
import os
from typing import Any, Dict, Iterator, List

from .state import read_state, scenario_time

KMSG_FILE = "kmsg"
_PROGRESS_FILE = "kmsg-progress.json"
_LOCK_FILE = "kmsg.lock"
BOOT_SECONDS = 3600.0  # the fake host has been up an hour at scenario time 0 (as hostroot's CPU counters)
MAX_LINES = 1000000  # per entry
KEYS = ("line", "devices", "at", "count", "every", "code")
# name -> (syslog level, message); {device} is the driver's device id, {n} the line's number, {code} a fault code
# ({code_lower} in lower case)
LINES = {
    # hb_read.c:194-213 (current drivers) and heart_beat_judge (older ones, FaultDiag test data)
    "heartbeat_lost": (5, "[ascend] [ERROR] [drv_soft_fault] [hb_read_one_device_count 203] <kworker/3:1:1234,1234> "
                          "Heartbeat lost! (device_id={device}; old_count=880; current_count=880; lost_count={n}; "
                          "total_lost_count={n}; miss_read_count=0; hb_read_fail_count=0)."),
    "heartbeat_lost_old": (5, "[ascend] [ERROR] [drv_soft_fault] [heart_beat_judge 318] <kworker/5:1H:39365> "
                              "Heartbeat lost! (device={device}; old_count=1104; new_count=1104; lost_count={n}; "
                              "total_lost_count={n}; total_10s_count=0; total_15s_count 0)."),
    # devdrv_adapt.c:97-111, devdrv_pcie_link_info.c:325, devdrv_pci.c:1587, devdrv_dma.c:839
    "pcie_aer_fatal": (5, "[ascend] [ERROR] [drv_pcie] [devdrv_pci_error_detected 104] <kworker/0:2:77:77> "
                          "Channel is blocked. (dev_id={device}; aer_critical_cnt={n})"),
    "pcie_link": (5, "[ascend] [ERROR] [drv_pcie] [devdrv_get_pcie_link_info 325] <npu-smi:4242:4242> "
                     "Failed to read link status. (dev_id={device};ret=-110)"),
    "device_os_load_failed": (5, "[ascend] [ERROR] [drv_pcie] [devdrv_load_device 1587] <kworker/u64:1:99:99> "
                                 "Device os load failed. (dev_id={device}; ret=-62)"),
    "dma_timeout": (5, "[ascend] [ERROR] [drv_pcie] [devdrv_dma_sync_copy 839] <python3:5150:5150> "
                       "Wait timeout. (dev_id={device}; chan_id=5)"),
    # dms_hotreset.c:500; devdrv_manager.c:1528 (module devdrv)
    "hot_reset": (5, "[ascend] [ERROR] [dms_module] [dms_hotreset_task 500] <npu-smi:4243:4243> "
                     "Hot reset is being performed on some devices. (dev_id={device})"),
    "device_not_ready": (5, "[ascend] [ERROR] [devdrv] [devdrv_manager_get_devinfo 1528] <npu-smi:4244:4244> "
                            "Device is not ready. (dev_id={device}; dev_ready=0; info_dev_id={device})"),
    # the older order of the error prefix, "[drv_soft_fault] [ERROR]" (FaultDiag's heartbeat rule allows both)
    "heartbeat_lost_module_first": (5, "[ascend] [drv_soft_fault] [ERROR] [heart_beat_judge 318] <kworker/2:0H:4410> "
                                       "Heartbeat lost! (device={device}; old_count=52; new_count=52; "
                                       "lost_count={n}; total_lost_count={n}; total_10s_count=0; "
                                       "total_15s_count 0)."),
    # tsdrv tsdrv_hb_cq_callback, the line the CANN troubleshooting docs quote; {code_lower}: its exception code
    "ts_exception": (5, "[ascend] [ERROR] [tsdrv] [tsdrv_hb_cq_callback 332] <kworker/0:0:20353> receive ts "
                        "exception msg, call excep_code=0x{code_lower}, time=1722249204.850014098s, "
                        "devid={device} tsid=0"),
    # the device event log's form (FaultDiag test data device-os_*.log); the code names the fault
    "fault_event": (5, "[EVENT] TDT(4717,tsdaemon):2023-10-31-16:41:39.406.087 [tsdaemon.cpp:1811] "
                       "[RunSpecialProcess][tid:4717] [TsdEVENT] Event id=0x{code}."),
}
NEEDS_CODE = ("fault_event", "ts_exception")


def check_entries(checker: Any, where: Any) -> List[Dict[str, Any]]:
    """A scenario's `kmsg:` list, checked with the scenario checker's helpers (scenario.py)."""
    entries = []
    for index, item in enumerate(checker.sequence(where, "kmsg")):
        key = "kmsg[{}]".format(index)
        values = checker.mapping(item, key, KEYS)
        for name in ("line", "devices"):
            if name not in values:
                checker.fail(item, key + "." + name, "missing")
        line = checker.text(values["line"], key + ".line")
        if line not in LINES:
            checker.fail(values["line"], key + ".line", "must be one of {}".format(", ".join(sorted(LINES))))
        entry: Dict[str, Any] = {
            "line": line,
            "devices": [checker.integer(device, key + ".devices", low=0)
                        for device in checker.sequence(values["devices"], key + ".devices")],
            "at": checker.number(values["at"], key + ".at", low=0.0) if "at" in values else 0.0,
            "count": checker.integer(values["count"], key + ".count", low=1) if "count" in values else 1,
            "every": checker.number(values["every"], key + ".every", low=0.0) if "every" in values else 0.0,
        }
        if entry["count"] > MAX_LINES:
            checker.fail(values["count"], key + ".count", "at most {} lines an entry".format(MAX_LINES))
        if (line in NEEDS_CODE) != ("code" in values):
            checker.fail(item, key + ".code", "{} lines need a code, and only they take one".format(
                " and ".join(NEEDS_CODE)))
        if "code" in values:
            code = values["code"]
            if not isinstance(code.value, str) or len(code.value) != 8 or \
                    any(char not in "0123456789abcdefABCDEF" for char in code.value):
                checker.fail(code, key + ".code", "expected a quoted 8-digit hex fault code such as \"80E01801\"")
            entry["code"] = code.value.upper()
        entries.append(entry)
    return entries


def reset(state_dir: str) -> None:
    """An empty log for a new simulation (the source finds the file there from the start)."""
    with _locked(state_dir):
        open(os.path.join(state_dir, KMSG_FILE), "w").close()
        _save_progress(state_dir, {"seq": 1, "written": {}})


def due(entry: Dict[str, Any], t: float) -> int:
    """How many lines per device of an entry are due at scenario time t. Pure."""
    if t < entry["at"]:
        return 0
    if not entry["every"]:
        return entry["count"]
    return min(entry["count"], int(math.floor((t - entry["at"]) / entry["every"])) + 1)


def write_due(state_dir: str, now: float) -> int:
    """Append the lines due at wall time `now`; returns how many were written."""
    state = read_state(state_dir)
    entries = state["scenario"].get("kmsg") or []
    if not entries:
        return 0
    t = scenario_time(state, now)
    with _locked(state_dir):
        progress = _load_progress(state_dir)
        records = []
        for index, entry in enumerate(entries):
            key = "{}:{}".format(state["scenario"]["name"], index)
            done, wanted = progress["written"].get(key, 0), due(entry, t)
            level, text = LINES[entry["line"]]
            for number in range(done, wanted):
                at = entry["at"] + number * entry["every"]
                for device in entry["devices"]:
                    message = text.format(device=device, n=number + 1, code=entry.get("code", ""),
                                          code_lower=entry.get("code", "").lower())
                    records.append("{},{},{},-;{}\n".format(level, progress["seq"], int((BOOT_SECONDS + at) * 1e6),
                                                             message))
                    progress["seq"] += 1
            progress["written"][key] = max(done, wanted)
        if records:
            with open(os.path.join(state_dir, KMSG_FILE), "a", encoding="utf-8") as handle:
                handle.writelines(records)
            _save_progress(state_dir, progress)
        return len(records)


@contextlib.contextmanager
def _locked(state_dir: str) -> Iterator[None]:
    with open(os.path.join(state_dir, _LOCK_FILE), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        yield


def _load_progress(state_dir: str) -> Dict[str, Any]:
    try:
        with open(os.path.join(state_dir, _PROGRESS_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
        if isinstance(data, dict) and isinstance(data.get("written"), dict) and isinstance(data.get("seq"), int):
            return data
    except (OSError, ValueError):
        pass
    return {"seq": 1, "written": {}}


def _save_progress(state_dir: str, progress: Dict[str, Any]) -> None:
    path = os.path.join(state_dir, _PROGRESS_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(progress, handle)
    os.replace(path + ".tmp", path)
