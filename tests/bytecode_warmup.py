"""Compile the test modules once before pytest-xdist's workers start.

Every worker imports every test module to collect it, and pytest rewrites a module's asserts into a bytecode
file of its own (`__pycache__/<name>.cpython-311-pytest-<version>.pyc`) the first time. On a fresh clone no such
file exists yet, so each of the workers (three per CPU) rewrote all of them: about 11 s of CPU each, a minute of
CPU for six workers on two CPUs, before the first test ran. The controller now has them written first, by one
collecting process per CPU over a share of the files; the workers then find them written. Where most of them
exist already (any run after the first), it does nothing, and a worker compiles the few changed files itself.
"""

import os
import subprocess
import sys
from typing import Iterator, List

import pytest

REWRITTEN_TAG = "{}-pytest-{}".format(sys.implementation.cache_tag, pytest.__version__)
WARMING_UP_ENV = "NPUMON_TESTS_BYTECODE_WARM_UP"
WARM_UP_TIMEOUT_SECONDS = 120


def collected_modules(root: str) -> Iterator[str]:
    """The files pytest rewrites when it collects `root`: its test modules and conftest files."""
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(name for name in subdirectories
                                   if name not in ("__pycache__", "node_modules") and not name.startswith("."))
        for name in sorted(files):
            if name.endswith(".py") and (name.startswith("test_") or name == "conftest.py"):
                yield os.path.join(directory, name)


def rewritten_path(path: str) -> str:
    """Where pytest keeps `path`'s assert-rewritten bytecode (as its get_cache_dir, PYTHONPYCACHEPREFIX too)."""
    directory = os.path.dirname(os.path.abspath(path))
    if sys.pycache_prefix:
        cache = os.path.join(sys.pycache_prefix, directory.lstrip(os.sep))
    else:
        cache = os.path.join(directory, "__pycache__")
    return os.path.join(cache, "{}.{}.pyc".format(os.path.basename(path)[:-3], REWRITTEN_TAG))


def not_rewritten(paths: List[str]) -> List[str]:
    return [path for path in paths if not os.path.exists(rewritten_path(path))]


def rewrite_once(root: str, processes: int) -> None:
    """Collect the test modules under `root` that have no rewritten bytecode yet, in `processes` processes at
    once, unless most have it already, or it is a warm-up's own collecting process, or nothing can be written."""
    if os.environ.get(WARMING_UP_ENV) or not os.access(root, os.W_OK):
        return
    modules = list(collected_modules(root))
    missing = not_rewritten(modules)
    if len(missing) * 4 < len(modules):
        return
    processes = max(1, processes)
    # The marker, not only `-p no:xdist`, keeps a collecting process from warming up again: xdist loaded as
    # `-p xdist.plugin` (PYTEST_ADDOPTS) would give it workers of its own.
    env = dict(os.environ, **{WARMING_UP_ENV: "1"})
    runs = [subprocess.Popen([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                              "-p", "no:xdist", *missing[index::processes]], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for index in range(min(processes, len(missing)))]
    for run in runs:
        try:
            run.wait(timeout=WARM_UP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:  # only a warm-up: the workers compile what it did not
            run.kill()
            run.wait()
