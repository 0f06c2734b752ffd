"""Issue 29 benchmark: the default test suite's wall time and how much of it is CPU, per test folder.

Run:  python3 benchmarks/bench_test_suite.py                 (every folder of tests/, one after the other)
      python3 benchmarks/bench_test_suite.py tests/daemon ...  (just those)
      python3 benchmarks/bench_test_suite.py --whole          (the README's test command, as one run, on every
                                                              core: -n auto --dist loadscope)
Prints a markdown table; paste it into results/test-suite.md.

Each folder row is one `python3 -m pytest -q -p no:cacheprovider PATH` in one process (slow tests excluded, as
by default), so a folder's CPU share is its own, not its share of a second worker: its wall
time, its CPU (user + sys of pytest and every process it waited for: daemons, npumon commands, the simulated
npu-smi) and the load average before and after. CPU / wall below 1.0 is time the run did not compute: a test
waiting in real time, or, on a busy machine, the run waiting for a core. Only a row whose load average stayed
low says which.
Target (issue 29): the whole default suite under 240 s on the project's 2-core machine, with nothing else
running, and at least half of its wall time CPU.
"""

import os
import platform
import re
import resource
import subprocess
import sys
import time
from typing import List, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_SECONDS = 3600  # per run: the whole suite took 528.7 s at 6e14f54
SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed).*?) in [\d.]+s")


def folders() -> List[str]:
    """Every folder of tests/ that holds test files, and the test files at the top of tests/ as one row."""
    tests = os.path.join(REPO, "tests")
    found = [os.path.join("tests", name) for name in sorted(os.listdir(tests))
             if os.path.isdir(os.path.join(tests, name)) and _has_tests(os.path.join(tests, name))]
    top = [os.path.join("tests", name) for name in sorted(os.listdir(tests))
           if name.startswith("test_") and name.endswith(".py")]
    return found + ([" ".join(top)] if top else [])


def _has_tests(directory: str) -> bool:
    return any(name.startswith("test_") and name.endswith(".py")
               for _, _, files in os.walk(directory) for name in files)


XDIST = ["-n", "auto", "--dist", "loadscope"]  # the README's command: one worker per core, a module per worker


def run(paths: str, options: Sequence[str] = ()) -> Tuple[str, float, float, str, str]:
    """(pytest's summary, wall seconds, CPU seconds, load average before, after) of one run."""
    load_before = _load()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options] + paths.split(),
                          cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=TIMEOUT_SECONDS)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    summaries = [match.group(1) for match in map(SUMMARY.match, proc.stdout.splitlines()) if match]
    return (summaries[-1] if summaries else "exit {}".format(proc.returncode)), wall, cpu, load_before, _load()


def _load() -> str:
    return " ".join("{:.1f}".format(value) for value in os.getloadavg())


def main(argv: List[str]) -> int:
    whole = argv[:1] == ["--whole"]
    targets = ["tests"] if whole else (argv or folders())
    print("{}, {} cores, Python {}, {}".format(platform.node() or "host", os.cpu_count(),
                                                platform.python_version(), time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                          time.gmtime())))
    print()
    print("| tests | result | wall | CPU | CPU / wall | load average before; after |")
    print("|---|---|---|---|---|---|")
    total_wall = total_cpu = 0.0
    for target in targets:
        summary, wall, cpu, before, after = run(target, XDIST if whole else ())
        total_wall, total_cpu = total_wall + wall, total_cpu + cpu
        label = target if " " not in target else "tests/test_*.py"
        print("| {} | {} | {:.1f} s | {:.1f} s | {:.0%} | {}; {} |".format(label, summary, wall, cpu, cpu / wall,
                                                                          before, after), flush=True)
    if len(targets) > 1:
        print("| all of the above | | {:.1f} s | {:.1f} s | {:.0%} | |".format(total_wall, total_cpu,
                                                                         total_cpu / total_wall))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
