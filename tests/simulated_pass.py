"""One pass of a simulated host as `npumon check` makes it (latency off), and the built-in rules' findings on it
(a rule's `for:` does not delay it in one pass)."""

from clocked_host import FakeClock
from npumon.settings import parse_config
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules
from npumon.sim.inprocess import InProcessNpuSmi
from npumon.sim.simulation import prepare_simulation
from npumon.sim.state import read_state
from npumon.sim.target import simulated_target, simulation_config
from npumon.sources.collection import SourceSet


PASS_DEADLINE_SECONDS = 120.0  # far beyond a pass with latency off: it only makes the pass one-shot


def judged_pass(directory, scenario, config_text="", product=None, wrap_spawn=None):
    """(snapshot, findings) of one pass over `scenario` simulated in `directory`, with the config `config_text`;
    `wrap_spawn(spawn)`: a spawn in place of the simulator's (one that damages its answers)."""
    sim = prepare_simulation(str(directory), scenario, product=product, time_scale=0, latency_scale=0)
    # simulation_config: what sources keep (the learned chip count, cursors) stays with this simulation, as
    # `npumon check --simulate` keeps it, instead of going to the config's state_dir for the next test to find
    config = simulation_config(parse_config(config_text), str(directory))
    # on a fake clock that a source's wait within the pass moves on (the processes' second CPU sample), so a
    # pass waits for nothing; the scenario is frozen (time_scale 0) whatever the clock says
    clock = FakeClock(read_state(str(directory))["start_time"])
    spawn = InProcessNpuSmi(clock=clock, sleep=clock.sleep)
    spawn = spawn if wrap_spawn is None else wrap_spawn(spawn)
    collection = SourceSet(config, simulated_target(sim, spawn=spawn), clock=clock, sleep=clock.sleep)
    try:
        # within a deadline, as `npumon check` makes its pass: the identity tier then sweeps the die ids in
        # this one pass (a daemon's first identity poll reads `info -m` alone), so compat series are served
        snapshot = collection.collect_once(within=PASS_DEADLINE_SECONDS)
    finally:
        collection.close()
    rules, params = load_rules(config.rule_files)
    return snapshot, RuleEngine(rules, params, one_shot=True).evaluate(snapshot, snapshot.time)
