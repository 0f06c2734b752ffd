"""Faults injected into the simulated libdcmi.so: a failing dcmi_init, calls that hang or crash the process,
return codes per call and chip. Kept in `<state_dir>/dcmi-faults.json` (prepare_simulation clears it) and
copied into the library's state file (state.py) on every write.

    set_dcmi_faults(sim_dir, hang=["dcmi_get_device_temperature"], hang_seconds=600)
    set_dcmi_faults(sim_dir, segfault=["dcmi_get_device_health"])
    set_dcmi_faults(sim_dir, init=-8012, codes={"dcmi_get_device_ecc_info@3": -8006})
    set_dcmi_faults(sim_dir)  # all clear again

A function name in `hang` or `segfault` may be "*": every call but dcmi_init.
"""

import json
import os
import re
from typing import Any, Dict, Iterable, Optional

from ..state import _write_json

FAULTS_FILE = "dcmi-faults.json"
_FUNCTION = re.compile(r"^(dcmi_[a-z0-9_]+|\*)$")
_CODE_TARGET = re.compile(r"^dcmi_[a-z0-9_]+(@[0-9]+)?$")


def read_faults(state_dir: str) -> Dict[str, Any]:
    """The simulation's DCMI faults; none when the file is absent."""
    try:
        with open(os.path.join(state_dir, FAULTS_FILE), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {}


def clear_faults(state_dir: str) -> None:
    try:
        os.unlink(os.path.join(state_dir, FAULTS_FILE))
    except FileNotFoundError:
        pass


def write_faults(state_dir: str, init: Optional[int] = None, hang: Iterable[str] = (),
                 hang_seconds: float = 3600.0, segfault: Iterable[str] = (),
                 codes: Optional[Dict[str, int]] = None) -> None:
    """Replace the simulation's DCMI faults file (state.set_dcmi_faults also rewrites the library's state).
    Raises ValueError for a name that is not a DCMI function or a code that is not an int."""
    faults: Dict[str, Any] = {"hang": _functions(hang, "hang"), "segfault": _functions(segfault, "segfault"),
                              "hang_seconds": float(hang_seconds), "codes": {}}
    if init is not None:
        faults["init"] = _code(init, "init")
    for target, code in (codes or {}).items():
        if not _CODE_TARGET.match(str(target)):
            raise ValueError("codes: {!r} is not a DCMI function name, optionally @<logic id>".format(target))
        faults["codes"][target] = _code(code, target)
    _write_json(os.path.join(os.path.abspath(state_dir), FAULTS_FILE), faults)


def _functions(names: Iterable[str], what: str):
    names = [names] if isinstance(names, str) else list(names)
    for name in names:
        if not _FUNCTION.match(str(name)):
            raise ValueError("{}: {!r} is not a DCMI function name (or *)".format(what, name))
    return names


def _code(code: Any, what: str) -> int:
    if isinstance(code, bool) or not isinstance(code, int):
        raise ValueError("{}: the return code must be an int, got {!r}".format(what, code))
    return code
