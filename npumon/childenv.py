"""The environment of every child process npumon starts: npu-smi, the probe, fan commands, the watchdog.

Two kinds of variables are left out. systemd's (NOTIFY_SOCKET, WATCHDOG_*): a child must not report
readiness or ping the watchdog on npumon's behalf. And every variable that holds a secret -- those the
config names in a receiver's `url_env`, `secret_env`, `routing_key_env` or `bearer_token_env`: npu-smi,
the probe and a fan command need none of them, and a child's environment is readable in
/proc/<pid>/environ by its user and lands in core dumps and crash reports.

Loading a config registers its secret variables (`withhold`); the set only grows, so a variable stays
withheld after a reload drops the receiver that named it, while the daemon still has it.
"""

import os
import threading
from typing import Dict, Iterable, Mapping, Optional, Set

SYSTEMD_VARIABLES = frozenset(("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"))

_lock = threading.Lock()
_withheld: Set[str] = set()


def withhold(names: Iterable[str]) -> None:
    """From now on, no child of this process sees these variables."""
    with _lock:
        _withheld.update(name for name in names if name)


def withheld() -> Set[str]:
    with _lock:
        return set(_withheld)


def child_environment(extra: Optional[Mapping[str, str]] = None,
                      inherited: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """`inherited` (default: npumon's own environment) without systemd's and the secret variables, plus
    `extra` (what the caller sets on purpose: the probe's library paths, the simulator's state)."""
    source = os.environ if inherited is None else inherited
    left_out = SYSTEMD_VARIABLES | withheld()
    env = {name: value for name, value in source.items() if name not in left_out}
    env.update(extra or {})
    return env
