"""Fewer malloc arenas for the daemon's threads.

glibc gives each thread that allocates its own malloc arena (up to 8 per core), and memory freed in one arena
is not reused by another: a daemon whose poll, scrape and service threads each build and drop a few MB (a
render, a snapshot, an npu-smi answer) keeps several such high-water marks resident. Two arenas hold the
daemon's steady RSS about 4 MB lower in the simulated A3 benchmark (benchmarks/results/cost.md) and cost no
measurable CPU: the threads seldom allocate at the same moment. Called before the first thread starts, since
arenas are made as threads first allocate. A MALLOC_ARENA_MAX the operator set wins; other C libraries
(musl has no mallopt) are left as they are.
"""

import ctypes
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
