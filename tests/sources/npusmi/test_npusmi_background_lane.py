"""The background sweeps (the chips' ids, the HCCS and SIO links, voltages): one call at a time in the daemon,
every slot in a one-shot pass (check, diag). That their tiers run one at a time is the scheduler's
(tests/daemon/test_jobs.py)."""

import threading
import time

from npumon.sim import prepare_simulation
from npumon.sim.inprocess import run_in_process
from npumon.sources.npusmi.source import BACKGROUND_QUERIES, NPU_SMI_TYPES, NpuSmiSource
from npumon.sources.runner import CommandRunner

BACKGROUND_TYPES = {NPU_SMI_TYPES.get(query, query) for query in BACKGROUND_QUERIES}


class CountingSpawn:
    """The in-process simulator, each background call held a little so that calls of other tiers overlap it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = {"background": 0, "other": 0}
        self.peak = {"background": 0, "other": 0}

    def __call__(self, argv, env, timeout_seconds):
        kind = "background" if "-t" in argv and argv[argv.index("-t") + 1] in BACKGROUND_TYPES else "other"
        with self.lock:
            self.running[kind] += 1
            self.peak[kind] = max(self.peak[kind], self.running[kind])
        try:
            time.sleep(0.02 if kind == "background" else 0.0)
            return run_in_process(argv, env, timeout_seconds)
        finally:
            with self.lock:
                self.running[kind] -= 1


def test_a_one_shot_pass_under_its_deadline_asks_a_sweep_on_every_slot(tmp_path):
    # check and diag have nothing to keep a slot for: the die-id sweep of 8 chips one at a time took 4.4 s of
    # NRPE's 9 at real npu-smi speed on a 910B host
    sim = prepare_simulation(str(tmp_path), "healthy", product="atlas-800i-a2", time_scale=0, latency_scale=0)
    spawn = CountingSpawn()
    runner = CommandRunner(sim.npu_smi_argv, 10, 4, env=sim.env, spawn=spawn)
    runner.not_after = time.monotonic() + 60
    source = NpuSmiSource(runner, intervals={"identity": 3600.0})
    try:
        source.poll("npu-smi")
        source.poll("npu-smi:identity")
        assert spawn.peak["background"] > 1, spawn.peak
        assert source.statuses(time.time())["npu-smi:identity"].ok
    finally:
        runner.terminate_all()
