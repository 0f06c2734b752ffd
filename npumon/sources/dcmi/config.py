"""The `collect:` and `dcmi:` config sections: which backend reads the chips, and where libdcmi.so is."""

from dataclasses import dataclass
from typing import List, Optional, Tuple

BACKENDS = ("auto", "dcmi", "npu-smi")


@dataclass(frozen=True)
class CollectConfig:
    """`collect:`. backend: auto (DCMI where the library loads and initialises, npu-smi otherwise), dcmi
    (DCMI, and the source is down with the reason where it cannot run), npu-smi (never load the library)."""

    backend: str = "auto"


@dataclass(frozen=True)
class DcmiConfig:
    """`dcmi:`. library: the libdcmi.so to load (default: the driver's standard locations); it must be root's
    and not group/world-writable, like every directory above it. timeout_seconds: one sweep's deadline, past
    which the worker process is killed and restarted."""

    library: Optional[str] = None
    timeout_seconds: float = 10.0
    open_timeout_seconds: float = 20.0  # loading the library and dcmi_init (slow while the driver starts)


def collect_problems(section: CollectConfig, config) -> List[Tuple[str, str]]:
    if section.backend not in BACKENDS:
        return [("collect.backend", "must be one of {} (got {!r})".format(", ".join(BACKENDS), section.backend))]
    return []


def dcmi_problems(section: DcmiConfig, config) -> List[Tuple[str, str]]:
    import os
    problems = []
    if section.library is not None and not os.path.isabs(section.library):
        problems.append(("dcmi.library", "must be an absolute path (a relative one is never loaded)"))
    if section.timeout_seconds <= 0:
        problems.append(("dcmi.timeout_seconds", "must be greater than 0"))
    if section.open_timeout_seconds <= 0:
        problems.append(("dcmi.open_timeout_seconds", "must be greater than 0"))
    return problems
