"""A pytest plugin that fails the run when anything under a directory changed during it.

tests/conftest.py guards the real state directory, /var/lib/npumon: every test runs with NPUMON_STATE_DIR set to
a temporary directory of its own, and a test (or an npumon process it starts) that still wrote to the host's
state would overwrite a real daemon's history, caches and cursors when the suite runs on an Atlas host.

Under pytest-xdist the guard runs once, in the controller: it lists root before the workers start and after they
have all finished, so a change made in any worker is reported once, and the workers (which register the plugin
too, through the same conftest) stay out of it.
"""

import os
from typing import Dict, List, Optional, Tuple

import pytest

Entry = Tuple[str, int, int]  # (kind, size, mtime in ns) of one path


def listing(root: str) -> Optional[Dict[str, Entry]]:
    """Every path under root (root itself as "."), or None when root does not exist."""
    if not os.path.lexists(root):
        return None
    found = {".": _entry(root)}
    for directory, names, files in os.walk(root):
        for name in names + files:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, root)] = _entry(path)
    return found


def _entry(path: str) -> Entry:
    info = os.lstat(path)
    kind = "dir" if os.path.isdir(path) and not os.path.islink(path) else "file"
    return kind, info.st_size, info.st_mtime_ns


def changes(root: str, before: Optional[Dict[str, Entry]], after: Optional[Dict[str, Entry]]) -> List[str]:
    """What differs between two listings of root, one "PATH: created|removed|modified" line per path."""
    before, after = before or {}, after or {}
    found = [(path, "created") for path in set(after) - set(before)]
    found += [(path, "removed") for path in set(before) - set(after)]
    found += [(path, "modified") for path in set(before) & set(after) if before[path] != after[path]]
    return ["{}: {}".format(os.path.normpath(os.path.join(root, path)), what) for path, what in sorted(found)]


class StateGuard:
    """Registered as a plugin: lists `root` when the session starts, again when it ends, and fails the run
    (exit status 1, one line per change in the summary) if they differ."""

    def __init__(self, root: str):
        self.root = root
        self.before: Optional[Dict[str, Entry]] = None
        self.found: List[str] = []

    @pytest.hookimpl(tryfirst=True)  # before xdist's controller starts its workers
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not _xdist_worker(session.config):
            self.before = listing(self.root)

    @pytest.hookimpl(trylast=True)  # after xdist's controller has taken its workers down
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if _xdist_worker(session.config):
            return
        self.found = changes(self.root, self.before, listing(self.root))
        if self.found and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.found:
            terminalreporter.write_sep("=", "{} changed during the run".format(self.root), red=True)
            for change in self.found:
                terminalreporter.write_line(change)


def _xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")  # what xdist sets on a worker's config, and only there
