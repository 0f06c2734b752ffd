"""Where npu-smi and the host facts come from: the real host, or another one a Target stands for.

The sources read only what the Target hands them: the commands to run, the host's root (and what refreshes
its /proc), and where the kernel log, libdcmi.so and pyACL come from when they are not the real host's (the
simulator's Target, npumon/sim/target.py, supplies all of them). Nothing here knows which host it is.
"""

import os
import shutil
import socket
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple


@dataclass(frozen=True)
class KernelLog:
    """A kernel log a Target supplies in place of /dev/kmsg: a file of kmsg records, and what runs before each
    read (`before_read(now)`, e.g. the host writing the lines due by then)."""

    path: str
    before_read: Optional[Callable[[float], Any]] = None


@dataclass(frozen=True)
class DcmiLibrary:
    """A libdcmi.so a Target supplies in place of the driver's standard locations. `build()` makes it when DCMI
    is asked for: (its path or None, why not). It is owned by `owner_uid` and may sit under a sticky directory
    (/tmp). collect.backend auto keeps npu-smi on such a host; `dcmi` (or dcmi.library) asks for the library."""

    build: Callable[[], Tuple[Optional[str], str]]
    owner_uid: int
    sticky_dirs: bool = True


@dataclass(frozen=True)
class Target:
    """Where npu-smi and the host facts come from: the real host (Target.real), or another host's stand-ins."""

    npu_smi_argv: List[str]
    env: Optional[Dict[str, str]]  # added to the environment of what runs for this host (npu-smi, DCMI, the probe)
    root: str
    serving_url: Optional[str] = None  # a queue endpoint the host serves itself (turns the serving source on)
    serving_preset: str = "vllm"  # the engine whose metrics serving_url serves (a serving preset's name)
    spawn: Optional[Callable] = None  # runs npu-smi in place of a subprocess (runner.Spawn); None: the real one
    hccn_tool_argv: Optional[List[str]] = None  # runs in place of the default hccn_tool (not checked as a file)
    dcmi_library: Optional[DcmiLibrary] = None  # None: the driver's standard locations, owned by root
    kernel_log: Optional[KernelLog] = None  # None: /dev/kmsg under root, where faults.kmsg turns it on
    acl_dir: Optional[str] = None  # a pyACL the probe imports in place of a real install (no model then)
    atc_argv: Optional[List[str]] = None  # with acl_dir: the ATC the probe's compute step runs (None: none)
    # runs before each read of /proc/<pid> (`proc_before_read(now)`, e.g. the host writing its processes' CPU
    # time due by then); None: the real /proc needs nothing
    proc_before_read: Optional[Callable[[float], Any]] = None
    label: Optional[str] = None  # how the log names this host's npu-smi; None: its command line
    # how a reloaded config builds the target again (npu_smi or root may have changed); None: it stays
    from_config: Optional[Callable[[Any], "Target"]] = None

    @classmethod
    def real(cls, config: Any) -> "Target":  # config: the whole Config (npumon/settings.py)
        return cls([config.npu_smi], None, config.root, from_config=cls.real)

    def reconfigured(self, config: Any) -> "Target":
        """The target for a reloaded config."""
        return self if self.from_config is None else self.from_config(config)

    def describe(self) -> str:
        return self.label or " ".join(self.npu_smi_argv)

    def host_name(self) -> str:
        """The host's name as the host source reads it (another host's own, under its root): one name for
        /status, the metrics and the alerts, also before the host source has reported."""
        try:
            with open(os.path.join(self.root, "proc", "sys", "kernel", "hostname"), encoding="utf-8") as handle:
                name = handle.read().strip()
        except (OSError, UnicodeDecodeError):
            name = ""
        return name or socket.gethostname()


class NpuSmiMissing(RuntimeError):
    """The configured npu-smi is not there: `check` answers UNKNOWN."""


def find_npu_smi(command: str) -> str:
    path = shutil.which(command)
    if path is None:
        raise NpuSmiMissing("npu-smi not found: {!r} is not an executable file or on PATH "
                            "(set npu_smi in the config, or use --simulate)".format(command))
    return path
