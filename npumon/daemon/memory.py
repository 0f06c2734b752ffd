"""The daemon's memory: fewer malloc arenas for its threads, and its start-up objects out of the collector's way.

glibc gives each thread that allocates its own malloc arena (up to 8 per core), and memory freed in one arena
is not reused by another: a daemon whose poll, scrape and service threads each build and drop a few MB (a
render, a snapshot, an npu-smi answer) keeps several such high-water marks resident. Two arenas hold the
daemon's steady RSS about 4 MB lower in the simulated A3 benchmark (benchmarks/results/cost.md) and cost no
measurable CPU: the threads seldom allocate at the same moment. Called before the first thread starts, since
arenas are made as threads first allocate. A MALLOC_ARENA_MAX the operator set wins; other C libraries
(musl has no mallopt) are left as they are.
"""

import ctypes
import gc
import os

M_ARENA_MAX = -8  # glibc's malloc.h
DAEMON_ARENAS = 2


def limit_malloc_arenas(arenas: int = DAEMON_ARENAS) -> bool:
    """True when glibc took the limit; False where the environment sets one or the C library has no mallopt."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(M_ARENA_MAX, arenas) == 1


def freeze_startup_objects() -> int:
    """Move what start-up made (modules, classes, the config, the rules: ~50,000 objects) out of the cyclic
    collector's reach: they live as long as the process, yet every full collection walked them again, about
    30 ms with the interpreter held (a scrape arriving then waited). Collected first, so nothing that is
    already garbage is kept. Then the collector is on: `npumon run` keeps it off while it starts
    (cli/parser.py), where it only walked these objects over and over. Returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    gc.enable()
    return gc.get_freeze_count()
