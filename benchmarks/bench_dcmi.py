"""Issue 16 benchmark: one full sweep of the simulated 16-chip Atlas A3 through DCMI vs through npu-smi, with
the simulator's realistic latency model (npu-smi: start-up plus per-chip time per call; the simulated
libdcmi.so: DCMI_CALL_SECONDS per call, 17.5 ms from AReaL's measurement of 16 chips in about 1.1 s), npumon's CPU
for each, and a quick `npumon check` through DCMI.

- npu-smi: one `collect_once(full=True)` of the npu-smi source with every query tier on (the main table, then
  usages, power, health, ecc, board, common, memory, volt, identity), each call the real executable, every tier's
  budget long enough (600 s) that no call is left out; the probe and the NPU network (hccn_tool) are left out,
  being neither backend's (an earlier version of this benchmark counted hccn_tool's calls in npu-smi's sweep);
- DCMI: the first sweep (everything, ids included), then STEADY_RUNS steady sweeps (what every poll reads), each
  through the worker process; the npu-smi main table, which the DCMI backend still reads, is timed apart;
- the quick pass of `npumon check` through DCMI (health, error codes, ECC), as a sweep and as the whole command.

npumon CPU = the daemon process's user+system time (getrusage, this process) plus, for DCMI, the worker's
(read from /proc before it exits). The simulators' own CPU (npu-smi stand-ins) is not npumon's.

Run:  python benchmarks/bench_dcmi.py      (prints a markdown report)
"""

import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("NPUMON_SIM_LATENCY_SCALE", "1")
os.environ["NPUMON_SIM_IN_PROCESS"] = "0"  # npu-smi: a real process per call, as on a host

from npumon.settings import parse_config  # noqa: E402 - after the environment is set
from npumon.sim.dcmi import build_fake_library  # noqa: E402
from npumon.sim.simulation import prepare_simulation  # noqa: E402
from npumon.sim.target import simulated_target, simulation_config  # noqa: E402
from npumon.sources.collection import SourceSet  # noqa: E402
from npumon.sources.dcmi import backend  # noqa: E402
from npumon.sources.dcmi.source import DcmiSource  # noqa: E402

PRODUCT = "atlas-a3"
# Every query tier on, each with a budget (its interval) no sweep at this speed exceeds: nothing left out.
ALL_QUERIES = ("poll: {usages_seconds: 600, power_seconds: 600, health_seconds: 600, ecc_seconds: 600, "
               "board_seconds: 600, identity_seconds: 600, common_seconds: 600, memory_seconds: 600, "
               "volt_seconds: 600, host_seconds: 0}\n")
STEADY_RUNS = 3
CHECK_RUNS = 3


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_of(pid: int) -> float:
    with open("/proc/{}/stat".format(pid)) as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def npu_smi_sweep(state_dir: str):
    sim = prepare_simulation(state_dir, product=PRODUCT, time_scale=0)
    target = dataclasses.replace(simulated_target(sim), spawn=None)  # real simulator processes, as on hardware
    # max_age: a sweep this long must not age its own first values out before it ends
    # the chip backends only: the probe and the NPU network (hccn_tool) are neither backend's and share its slots
    config = parse_config("collect: {backend: npu-smi}\nmax_age_seconds: 3600\n" + ALL_QUERIES)
    sources = SourceSet(simulation_config(config, state_dir), target, skip=("probe", "hccn"))
    try:
        cpu, wall = _cpu_self(), time.monotonic()
        sources.poll("npu-smi")
        table_wall, table_cpu = time.monotonic() - wall, _cpu_self() - cpu
        snapshot = sources.collect_once(full=True)
        left_out = sum(status.left_out for status in snapshot.sources.values())
        for name, status in sorted(snapshot.sources.items()):
            if status.left_out or not status.ok:
                print("{}: {}".format(name, status.error), file=sys.stderr)
        return (time.monotonic() - wall, _cpu_self() - cpu, table_wall, table_cpu, len(snapshot.chips), left_out)
    finally:
        sources.close()


def _timed_poll(source: DcmiSource):
    pid = source.worker.pid
    cpu, worker_cpu, wall = _cpu_self(), _cpu_of(pid), time.monotonic()
    source.poll("dcmi")
    return time.monotonic() - wall, _cpu_self() - cpu, _cpu_of(pid) - worker_cpu


def dcmi_sweeps(state_dir: str, library: str, quick_pass: bool = False):
    sim = prepare_simulation(state_dir, product=PRODUCT, time_scale=0)
    decision = backend.Decision(backend.DCMI, library, "benchmark", owner_uid=os.getuid(), sticky_dirs=True,
                                env=dict(sim.env))
    source = DcmiSource(decision, interval=15.0, max_age=120.0, timeout_seconds=120.0, open_timeout_seconds=30.0,
                        quick_pass=quick_pass)
    try:
        opened = time.monotonic()
        source.poll("dcmi")  # start the worker, load and initialise the library, and a first sweep
        open_and_first = time.monotonic() - opened
        source._static_due = 0.0
        runs = [_timed_poll(source) for _ in range(1 if quick_pass else 1 + STEADY_RUNS)]
        status = source.statuses(time.time())["dcmi"]
        return open_and_first, runs, status, len(source.fresh_values(time.time()))
    finally:
        source.close()


def quick_checks(state_dir: str):
    """The whole `npumon check` (quick, --json) through DCMI, as a user runs it: wall seconds and exit codes."""
    config = os.path.join(state_dir, "dcmi.yaml")
    os.makedirs(state_dir, exist_ok=True)
    with open(config, "w") as handle:
        handle.write("collect: {backend: dcmi}\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    results = []
    for _ in range(CHECK_RUNS):
        wall = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "check", "--simulate", "--sim-product",
                               PRODUCT, "--config", config, "--json"], capture_output=True, text=True, env=env,
                              timeout=120)
        took = time.monotonic() - wall
        error = json.loads(proc.stdout).get("error") if proc.stdout.startswith("{") else proc.stderr[-200:]
        results.append((took, proc.returncode, error))
    return results


def _load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def main() -> None:
    library = build_fake_library()
    loads = [_load()]
    with tempfile.TemporaryDirectory() as directory:
        smi_wall, smi_cpu, table_wall, table_cpu, chips, left_out = npu_smi_sweep(os.path.join(directory, "smi"))
        loads.append(_load())
        open_first, runs, status, dcmi_chips = dcmi_sweeps(os.path.join(directory, "dcmi"), library)
        quick_open, quick_runs, quick_status, _ = dcmi_sweeps(os.path.join(directory, "quick"), library, True)
        loads.append(_load())
        checks = quick_checks(os.path.join(directory, "check"))
        loads.append(_load())
    print("# One full sweep of the simulated 16-chip A3: DCMI vs npu-smi\n")
    print("Simulator latency model on (scale 1), `python benchmarks/bench_dcmi.py`; in the simulator, not on "
          "hardware. Load average (1, 5, 15 min) at the start, after npu-smi, after DCMI, after the checks: "
          "{}.\n".format("; ".join(loads)))
    print("| path | chips | wall | npumon CPU (daemon + worker) |")
    print("|---|---|---|---|")
    print("| npu-smi: main table + every `-t` query ({} calls left out) | {} | {:.2f} s | {:.0f} ms |".format(
        left_out, chips, smi_wall, smi_cpu * 1000))
    print("| npu-smi main table alone (read on both backends) | {} | {:.2f} s | {:.0f} ms |".format(
        chips, table_wall, table_cpu * 1000))
    labels = ["first sweep (ids and die ids too)"] + ["steady sweep {} (every poll)".format(i + 1)
                                                      for i in range(STEADY_RUNS)]
    for label, (wall, cpu, worker_cpu) in zip(labels, runs):
        print("| DCMI {} | {} | {:.2f} s | {:.0f} ms ({:.0f} + {:.0f}) |".format(
            label, dcmi_chips, wall, (cpu + worker_cpu) * 1000, cpu * 1000, worker_cpu * 1000))
    wall, cpu, worker_cpu = quick_runs[0]
    print("| DCMI quick pass (`npumon check`: health, error codes, ECC) | {} | {:.2f} s | {:.0f} ms ({:.0f} + {:.0f}) "
          "|".format(dcmi_chips, wall, (cpu + worker_cpu) * 1000, cpu * 1000, worker_cpu * 1000))
    print("| DCMI open (worker start, load, dcmi_init) + first quick pass | {} | {:.2f} s | |".format(
        dcmi_chips, quick_open))
    steady = sorted(run[0] for run in runs[1:])
    median = steady[len(steady) // 2]
    print("\nnpu-smi sweep / DCMI steady sweep (median of {}): {:.1f}x wall; with the npu-smi main table the "
          "DCMI backend reads beside it, {:.1f}x. DCMI source: ok={}, error={}; quick: ok={}.".format(
              STEADY_RUNS, smi_wall / median, smi_wall / (median + table_wall), status.ok, status.error,
              quick_status.ok))
    print("\n`npumon check --simulate --sim-product {} --json` with `collect.backend: dcmi` (default --timeout 9), "
          "{} runs: {}.".format(PRODUCT, CHECK_RUNS, ", ".join(
              "{:.2f} s exit {}{}".format(took, code, "" if error is None else " ({})".format(error))
              for took, code, error in checks)))


if __name__ == "__main__":
    sys.exit(main())
