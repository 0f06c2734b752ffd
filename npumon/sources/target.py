"""Where npu-smi and the host facts come from: the real host, or a simulated one."""

import os
import shutil
import socket
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional


@dataclass(frozen=True)
class Target:
    """Where npu-smi and the host facts come from: the real host, or a simulated one."""

    npu_smi_argv: List[str]
    env: Optional[Dict[str, str]]
    root: str
    simulated: bool = False
    serving_url: Optional[str] = None  # a simulated host's queue endpoint (turns the serving source on)
    sim_state_dir: Optional[str] = None  # a simulated host's own directory
    spawn: Optional[Callable] = None  # runs npu-smi in place of a subprocess (runner.Spawn); None: the real one

    @classmethod
    def real(cls, config: Any) -> "Target":  # config: the whole Config (config/schema.py)
        return cls([config.npu_smi], None, config.root)

    def host_name(self) -> str:
        """The host's name as the host source reads it (a simulated host's own, under its root): one name for
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
