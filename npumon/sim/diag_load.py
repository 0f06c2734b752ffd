"""Which simulated chips run a diag load now, so that the simulated npu-smi shows them loaded (and a throttled
one hot and slow), as a real chip's sensors would while `npumon diag -r 3` samples them.

The simulated device (diag_acl.py) marks its chip while MatMuls run: one small file per device in the
simulation's state directory, `<until> <clock ratio>`, rewritten at most every MARK_EVERY seconds. A mark is
current until `until`: a child killed mid-load leaves a mark that expires by itself. Tiny on purpose: the
simulated npu-smi imports it on every call.
"""

import os
from typing import Dict, Optional, Tuple

LOAD_FILE_PREFIX = "diag-load-"
MARK_SECONDS = 2.0  # how long a mark stays current after the last MatMul that wrote it
MARK_EVERY = 0.5
LOAD_POWER_WATTS = 310.0  # a 910B under MatMul load runs near its rated power
LOAD_TEMPERATURE_RISE = 22
THROTTLED_TEMPERATURE = 96  # a chip that lowers its clock does so at its thermal limit


def mark_load(state_dir: str, device: int, clock_ratio: float, now: float) -> None:
    path = os.path.join(state_dir, "{}{}".format(LOAD_FILE_PREFIX, device))
    temp = path + ".tmp{}".format(os.getpid())
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write("{:.3f} {:.4f}\n".format(now + MARK_SECONDS, clock_ratio))
    os.replace(temp, path)


def loads_now(state_dir: str, now: float) -> Dict[int, float]:
    """device -> AI Core clock ratio (1.0: full clock) of every chip under a diag load now."""
    loads = {}
    try:
        names = os.listdir(state_dir)
    except OSError:
        return loads
    for name in names:
        if not name.startswith(LOAD_FILE_PREFIX) or not name[len(LOAD_FILE_PREFIX):].isdigit():
            continue
        mark = _read_mark(os.path.join(state_dir, name))
        if mark is not None and mark[0] > now:
            loads[int(name[len(LOAD_FILE_PREFIX):])] = mark[1]
    return loads


def _read_mark(path: str) -> Optional[Tuple[float, float]]:
    try:
        with open(path, encoding="utf-8") as handle:
            until, ratio = handle.read().split()
        return float(until), float(ratio)
    except (OSError, ValueError):
        return None
