"""Where libdcmi.so comes from, and the checks it passes before anything loads it.

Like npu-exporter (MindCluster common-utils/utils/path.go, shared/reference/npu-exporter-and-dcmi.md section 2.1):
a library is loaded only from an absolute path whose file, and every directory above it up to `/`, is owned by
root and not writable by group or others; a symlink must itself be root's and its target passes the same checks.
A library anyone else could replace would run its code inside npumon. The first check that fails is named in one
line. `dcmi.library` in the config names the file; without it, the driver's standard locations are tried in order.
"""

import os
import stat
from typing import Callable, Optional, Sequence, Tuple

DEFAULT_LOCATIONS = (
    "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",  # where the driver package installs it
    "/usr/local/dcmi/libdcmi.so",  # the copy it puts next to the header
)
MAX_DEPTH = 20  # npu-exporter's limit on path components


class LibraryRefused(Exception):
    """The library may not be loaded; the message is one line naming the check that failed."""


def check_path(path: str, owner_uid: int = 0, lstat: Callable = os.lstat, sticky_dirs: bool = False) -> str:
    """The resolved path of a library that passes every check, or LibraryRefused naming the one that failed.
    `owner_uid`: the owner required (root). `sticky_dirs`: a root-owned sticky directory such as /tmp may be
    writable by all (nobody can replace what another user put there) -- only for the simulator's own library,
    which lives under a temporary directory; a real host's library never passes through one."""
    if not path:
        raise LibraryRefused("dcmi library: no path given")
    if not os.path.isabs(path):
        raise LibraryRefused("dcmi library {}: refused: not an absolute path".format(path))
    try:
        link = lstat(path)
    except OSError as exc:
        raise LibraryRefused("dcmi library {}: cannot be read: {}".format(path, exc.strerror or exc)) from None
    if stat.S_ISLNK(link.st_mode) and link.st_uid != owner_uid:
        raise LibraryRefused("dcmi library {}: refused: the symlink is owned by uid {}, not {}".format(
            path, link.st_uid, _who(owner_uid)))
    resolved = os.path.realpath(path)
    parts = [part for part in resolved.split(os.sep) if part]
    if len(parts) > MAX_DEPTH:
        raise LibraryRefused("dcmi library {}: refused: more than {} path components".format(path, MAX_DEPTH))
    try:
        target = lstat(resolved)
    except OSError as exc:
        raise LibraryRefused("dcmi library {}: cannot be read: {}".format(path, exc.strerror or exc)) from None
    if not stat.S_ISREG(target.st_mode):
        raise LibraryRefused("dcmi library {}: refused: {} is not a regular file".format(path, resolved))
    _check_entry(path, resolved, target, owner_uid, "file", False)
    directory = os.path.dirname(resolved)
    while True:
        try:
            info = lstat(directory)
        except OSError as exc:
            raise LibraryRefused("dcmi library {}: cannot read directory {}: {}".format(
                path, directory, exc.strerror or exc)) from None
        _check_entry(path, directory, info, owner_uid, "directory", sticky_dirs)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return resolved


def _check_entry(path: str, entry: str, info: os.stat_result, owner_uid: int, kind: str, sticky_ok: bool) -> None:
    shown = "" if entry == path else " ({} {})".format(kind, entry)
    if sticky_ok and info.st_mode & stat.S_ISVTX and info.st_uid in (0, owner_uid):
        return
    if info.st_uid != owner_uid:
        raise LibraryRefused("dcmi library {}: refused: not owned by {}{}: owner uid {}".format(
            path, _who(owner_uid), shown, info.st_uid))
    if info.st_mode & stat.S_IWGRP:
        raise LibraryRefused("dcmi library {}: refused: group-writable{} (mode {:o})".format(
            path, shown, stat.S_IMODE(info.st_mode)))
    if info.st_mode & stat.S_IWOTH:
        raise LibraryRefused("dcmi library {}: refused: world-writable{} (mode {:o})".format(
            path, shown, stat.S_IMODE(info.st_mode)))


def _who(uid: int) -> str:
    return "root" if uid == 0 else "uid {}".format(uid)


def find_library(configured: Optional[str], locations: Sequence[str] = DEFAULT_LOCATIONS,
                 owner_uid: int = 0, sticky_dirs: bool = False) -> Tuple[Optional[str], str]:
    """(the checked path to load, or None; why not, in one line). A configured path is the only one tried."""
    candidates = [configured] if configured else list(locations)
    problems = []
    for candidate in candidates:
        if not configured and not os.path.lexists(candidate):
            problems.append("{}: not there".format(candidate))
            continue
        try:
            return check_path(candidate, owner_uid, sticky_dirs=sticky_dirs), ""
        except LibraryRefused as exc:
            if configured:
                return None, str(exc)
            problems.append(str(exc))
    return None, "no usable libdcmi.so: " + "; ".join(problems)


def load(path: str):
    """dlopen a checked library (RTLD_GLOBAL like npu-exporter) as a bindings.Library; OSError if it will not."""
    import ctypes
    from .bindings import Library
    return Library(ctypes.CDLL(path, mode=os.RTLD_LAZY | ctypes.RTLD_GLOBAL))
