"""One pass of a simulated host as `npumon check` makes it (latency off), and the built-in rules' findings on it
(a rule's `for:` does not delay it in one pass)."""

from npumon.config.load import parse_config
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules
from npumon.sim.simulation import prepare_simulation
from npumon.sources.collection import SourceSet
from npumon.sources.target import Target


def judged_pass(directory, scenario, config_text="", product=None):
    """(snapshot, findings) of one pass over `scenario` simulated in `directory`, with the config `config_text`."""
    sim = prepare_simulation(str(directory), scenario, product=product, time_scale=0, latency_scale=0)
    config = parse_config(config_text)
    # sim_state_dir: what sources keep (the learned chip count, cursors) stays with this simulation, as
    # `npumon check --simulate` keeps it, instead of going to the config's state_dir for the next test to find
    target = Target(sim.npu_smi_argv, sim.env, sim.root, simulated=True, spawn=sim.spawn, sim_state_dir=str(directory))
    collection = SourceSet(config, target)
    try:
        snapshot = collection.collect_once()
    finally:
        collection.close()
    rules, params = load_rules(config.rule_files)
    return snapshot, RuleEngine(rules, params, one_shot=True).evaluate(snapshot, snapshot.time)
