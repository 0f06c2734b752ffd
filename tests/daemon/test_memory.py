"""The daemon's memory: glibc takes the malloc arena limit, an operator's MALLOC_ARENA_MAX wins, and threads that
allocate at once then share two arenas (counted from glibc's own malloc_stats()); start-up objects are frozen
after the garbage among them is collected."""

import gc
import os
import subprocess
import sys
import weakref

import pytest

from npumon.daemon.memory import freeze_startup_objects, limit_malloc_arenas

THREADS = """
import ctypes, sys, threading
from npumon.daemon.memory import freeze_startup_objects, limit_malloc_arenas
if sys.argv[1] == "limit":
    assert limit_malloc_arenas()
barrier = threading.Barrier(8)
def allocate():
    barrier.wait()  # all at once, so that glibc would give each its own arena
    kept = [bytearray(4096) for _ in range(2000)]
    barrier.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


def arenas(mode):
    env = {key: value for key, value in os.environ.items() if key != "MALLOC_ARENA_MAX"}
    done = subprocess.run([sys.executable, "-c", THREADS, mode], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr.count("Arena ")


def glibc():
    return os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None


@pytest.mark.skipif(not glibc(), reason="glibc only")
def test_threads_allocating_at_once_share_two_arenas():
    assert arenas("limit") <= 2
    assert arenas("free") > 2  # without the limit glibc makes more: the test could tell


@pytest.mark.skipif(not glibc(), reason="glibc only")
def test_an_operators_malloc_arena_max_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False



def test_start_up_objects_are_frozen_and_garbage_is_collected_first():
    class Cycle:
        pass

    garbage = Cycle()
    garbage.me = garbage  # only the cyclic collector can free it
    gone = weakref.ref(garbage)
    del garbage
    try:
        frozen = freeze_startup_objects()
        # a frozen object that dies leaves the count (the worker's other threads still free some)
        assert frozen > 1000 and 0.9 * frozen <= gc.get_freeze_count() <= frozen
        assert gone() is None  # collected, not kept frozen for ever
    finally:
        gc.unfreeze()


def test_freezing_turns_the_collector_on():
    gc.disable()
    try:
        freeze_startup_objects()
        assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_npumon_run_starts_with_the_collector_off_and_leaves_it_on(monkeypatch, tmp_path, capsys):
    """Off while the daemon's modules, config and rules are made (cmd_run), on again whichever way it ends."""
    import npumon.cli.run as run_module
    from npumon.cli.main import main

    seen = []

    def cmd_run(args):
        seen.append(gc.isenabled())
        raise RuntimeError("a start that fails")

    monkeypatch.setattr(run_module, "cmd_run", cmd_run)
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        main(["run", "--config", str(tmp_path / "none.yaml")])
    assert seen == [False] and gc.isenabled()
    assert main(["scenarios", "--json"]) == 0 and gc.isenabled()  # other commands leave it alone
