"""Which container a process runs in, from /proc/<pid>/cgroup (world-readable, unlike its environment).

Container runtimes name the cgroup after the container id: systemd driver `.../kubepods-burstable-pod<uid>.slice/
cri-containerd-<id>.scope` (also `docker-<id>.scope`, `crio-<id>.scope`), cgroupfs driver
`/kubepods/burstable/pod<uid>/<id>`. The pod-resources API has neither ids nor uids, so the id only names the
container; its pod and name come from the chip when exactly one container holds that chip (source.py).
"""

import os
import re
from dataclasses import dataclass
from typing import Optional

_CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
MAX_CGROUP_BYTES = 64 * 1024


@dataclass(frozen=True)
class ProcessContainer:
    container_id: str
    pod_uid: Optional[str]  # with dashes, as the API shows it


def container_of(cgroup_text: str) -> Optional[ProcessContainer]:
    """The container of a process from its cgroup file's text; None for a host process."""
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1].strip()
        for part in reversed(path.split("/")):
            match = _CONTAINER_ID.search(part)
            if match:
                uid = _POD_UID.search(path)
                return ProcessContainer(match.group(1), None if uid is None else uid.group(1).replace("_", "-"))
    return None


def read_container(proc_root: str, pid: int) -> Optional[ProcessContainer]:
    """The container of a pid under proc_root (the host's /proc, needs hostPID in a pod); None when the pid
    is not there (another PID namespace, or it ended) or runs on the host."""
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), "rb") as handle:
            text = handle.read(MAX_CGROUP_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    return container_of(text)
