"""Issue 16 benchmark: one full sweep of the simulated 16-chip Atlas A3 through DCMI vs through npu-smi, with
the simulator's realistic latency model (npu-smi: start-up plus per-chip time per call; the simulated
libdcmi.so: DCMI_CALL_SECONDS per call, from AReaL's measurement), and npumon's CPU for each.

- npu-smi: one `collect_once(full=True)` of the npu-smi source with every query tier on (the main table, then
  usages, power, health, ecc, board, common, memory, volt, identity), each call the real executable;
- DCMI: the first sweep (everything, ids included) and a steady sweep (what every poll reads), each through the
  worker process; the npu-smi main table, which the DCMI backend still reads, is timed apart.

npumon CPU = the daemon process's user+system time (getrusage, this process) plus, for DCMI, the worker's
(read from /proc before it exits). The simulators' own CPU (npu-smi stand-ins) is not npumon's.

Run:  python benchmarks/bench_dcmi.py      (prints a markdown report)
"""

import os
import resource
import sys
import tempfile
import time

os.environ.setdefault("NPUMON_SIM_LATENCY_SCALE", "1")
os.environ["NPUMON_SIM_IN_PROCESS"] = "0"  # npu-smi: a real process per call, as on a host

from npumon.config.load import parse_config  # noqa: E402 - after the environment is set
from npumon.sim.dcmi import build_fake_library  # noqa: E402
from npumon.sim.simulation import prepare_simulation  # noqa: E402
from npumon.sources.collection import SourceSet  # noqa: E402
from npumon.sources.dcmi import backend  # noqa: E402
from npumon.sources.dcmi.source import DcmiSource  # noqa: E402
from npumon.sources.target import Target  # noqa: E402

PRODUCT = "atlas-a3"
ALL_QUERIES = "poll: {common_seconds: 60, memory_seconds: 60, volt_seconds: 60, host_seconds: 0}\n"


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_of(pid: int) -> float:
    with open("/proc/{}/stat".format(pid)) as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def npu_smi_sweep(state_dir: str):
    sim = prepare_simulation(state_dir, product=PRODUCT, time_scale=0)
    target = Target(sim.npu_smi_argv, sim.env, sim.root, simulated=True, sim_state_dir=state_dir)
    sources = SourceSet(parse_config("collect: {backend: npu-smi}\n" + ALL_QUERIES), target, skip=("probe",))
    try:
        cpu, wall = _cpu_self(), time.monotonic()
        sources.poll("npu-smi")
        table_wall, table_cpu = time.monotonic() - wall, _cpu_self() - cpu
        snapshot = sources.collect_once(full=True)
        return time.monotonic() - wall, _cpu_self() - cpu, table_wall, table_cpu, len(snapshot.chips)
    finally:
        sources.close()


def dcmi_sweeps(state_dir: str, library: str):
    sim = prepare_simulation(state_dir, product=PRODUCT, time_scale=0)
    decision = backend.Decision(backend.DCMI, library, "benchmark", owner_uid=os.getuid(), sticky_dirs=True,
                                env=dict(sim.env))
    source = DcmiSource(decision, interval=15.0, max_age=120.0, timeout_seconds=120.0, open_timeout_seconds=30.0)
    try:
        source.poll("dcmi")  # start the worker, load and initialise the library (timed apart)
        source._static_due = 0.0
        results = []
        for label in ("first sweep (ids and die ids too)", "steady sweep (every poll)"):
            pid = source.worker.pid
            cpu, worker_cpu, wall = _cpu_self(), _cpu_of(pid), time.monotonic()
            source.poll("dcmi")
            results.append((label, time.monotonic() - wall, _cpu_self() - cpu, _cpu_of(pid) - worker_cpu))
        status = source.statuses(time.time())["dcmi"]
        return results, status, len(source.fresh_values(time.time()))
    finally:
        source.close()


def main() -> None:
    library = build_fake_library()
    with tempfile.TemporaryDirectory() as directory:
        smi_wall, smi_cpu, table_wall, table_cpu, chips = npu_smi_sweep(os.path.join(directory, "smi"))
        sweeps, status, dcmi_chips = dcmi_sweeps(os.path.join(directory, "dcmi"), library)
    print("# One full sweep of the simulated 16-chip A3: DCMI vs npu-smi\n")
    print("Simulator latency model on (scale 1), `python benchmarks/bench_dcmi.py`; in the simulator, not on "
          "hardware.\n")
    print("| path | chips | wall | npumon CPU (daemon + worker) |")
    print("|---|---|---|---|")
    print("| npu-smi: main table + every `-t` query | {} | {:.2f} s | {:.0f} ms |".format(
        chips, smi_wall, smi_cpu * 1000))
    print("| npu-smi main table alone (read on both backends) | {} | {:.2f} s | {:.0f} ms |".format(
        chips, table_wall, table_cpu * 1000))
    for label, wall, cpu, worker_cpu in sweeps:
        print("| DCMI {} | {} | {:.2f} s | {:.0f} ms ({:.0f} + {:.0f}) |".format(
            label, dcmi_chips, wall, (cpu + worker_cpu) * 1000, cpu * 1000, worker_cpu * 1000))
    steady = sweeps[1][1]
    print("\nnpu-smi sweep / DCMI steady sweep: {:.1f}x wall. DCMI source: ok={}, error={}.".format(
        smi_wall / steady, status.ok, status.error))


if __name__ == "__main__":
    sys.exit(main())
