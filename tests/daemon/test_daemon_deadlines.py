"""Nothing a poll does can run unboundedly long: a query tier ends within its budget however many cards
hang, the main table always finds a free npu-smi slot, and a closed runner starts nothing new."""

import dataclasses
import sys
import threading
import time

from npumon.sources.collection import SourceSet
from npumon.settings import parse_config
from npumon.sim import prepare_simulation
from npumon.sim.target import simulated_target
from npumon.sources.npusmi.source import TABLE_SOURCE, query_source_name
from npumon.sources.runner import CommandRunner

# npu-smi whose main table answers (the simulator's) and whose `-t` queries hang, like a driver that
# still lists its chips but no longer answers per-card calls.
QUERIES_HANG = """\
import sys, time
if "-t" in sys.argv:
    time.sleep(120)
from npumon.sim.npusmi import main
sys.exit(main(sys.argv[1:]))
"""


def wrapped(simulation, wrapper):
    """The simulated host with `wrapper` as its npu-smi, run as a subprocess."""
    return dataclasses.replace(simulated_target(simulation), npu_smi_argv=[sys.executable, str(wrapper)], spawn=None)


def test_a_hanging_query_tier_ends_within_its_budget_and_never_starves_the_table(tmp_path):
    simulation = prepare_simulation(str(tmp_path / "sim"), "healthy")  # 8 cards
    wrapper = tmp_path / "npu-smi.py"
    wrapper.write_text(QUERIES_HANG)
    config = parse_config("npu_smi_timeout_seconds: 3\nnpu_smi_max_concurrent: 2\npoll: {usages_seconds: 2}\n")
    collector = SourceSet(config, wrapped(simulation, wrapper))
    try:
        collector.poll("npu-smi")
        timings = {}

        def poll_usages():
            started = time.monotonic()
            collector.poll("npu-smi:usages")
            timings["usages"] = time.monotonic() - started

        query = threading.Thread(target=poll_usages)
        query.start()
        time.sleep(0.5)  # the query calls now hold both query slots
        started = time.monotonic()
        collector.poll("npu-smi")
        table_seconds = time.monotonic() - started
        query.join(15)

        sources = collector.snapshot().sources
        assert sources[TABLE_SOURCE].ok and table_seconds < 2.5  # waiting for a query slot would take 3 s
        # 8 cards two at a time would take 4 x 3 s; the budget is max(usages_seconds, timeout) = 3 s
        # (plus killing and reaping the calls in flight).
        assert timings["usages"] < 5
        usages = sources[query_source_name("usages")]
        # the two calls that ran hung and were cut off at the budget; the six others found no slot in time
        assert not usages.ok and usages.error.startswith("2 of 2 calls failed; first: npu ")
        assert collector.npu_smi.stats.snapshot()["npu-smi:usages"].not_started == 6
    finally:
        collector.close()


# npu-smi that notes every `-t` call's card in a log, and hangs on cards 0 and 1.
LOGGING_TWO_CARDS_HANG = """\
import sys, time
if "-t" in sys.argv:
    card = sys.argv[sys.argv.index("-i") + 1]
    with open({log!r}, "a") as log:
        log.write(card + "\\n")
    if card in ("0", "1"):
        time.sleep(120)
from npumon.sim.npusmi import main
sys.exit(main(sys.argv[1:]))
"""


def test_cards_left_out_when_the_budget_runs_out_come_first_next_time(tmp_path):
    simulation = prepare_simulation(str(tmp_path / "sim"), "healthy")  # 8 cards
    calls = tmp_path / "calls.log"
    wrapper = tmp_path / "npu-smi.py"
    wrapper.write_text(LOGGING_TWO_CARDS_HANG.format(log=str(calls)))
    # budget = max(usages_seconds, timeout) = 1.5 s: cards 0 and 1 (two slots) use all of it
    config = parse_config("npu_smi_timeout_seconds: 1.5\nnpu_smi_max_concurrent: 2\npoll: {usages_seconds: 1}\n")
    collector = SourceSet(config, wrapped(simulation, wrapper))
    try:
        collector.poll("npu-smi")
        collector.poll("npu-smi:usages")
        assert sorted(calls.read_text().split()) == ["0", "1"]
        calls.write_text("")
        collector.poll("npu-smi:usages")
        # the next poll begins with the cards the last one left out, not with the hanging ones again
        assert sorted(calls.read_text().split()[:2]) == ["2", "3"]
    finally:
        collector.close()


def test_the_table_waits_for_no_slot_while_ordinary_calls_hang():
    runner = CommandRunner([sys.executable, "-c"], timeout_seconds=5, max_concurrent=2, priority_slots=1)
    hung = [threading.Thread(target=runner.run, args=(["import time; time.sleep(1.5)"],)) for _ in range(2)]
    for thread in hung:
        thread.start()
    time.sleep(0.3)
    queued = runner.run(["print('late')"], not_after=time.monotonic() + 0.3)  # both ordinary slots are busy
    started = time.monotonic()
    table = runner.run(["print('table')"], priority=True)
    assert table.stdout == "table\n" and time.monotonic() - started < 1.0
    assert not queued.started and "no free npu-smi slot" in queued.error
    for thread in hung:
        thread.join()


def test_a_closed_runner_kills_calls_in_flight_and_starts_no_new_ones():
    runner = CommandRunner([sys.executable, "-c"], timeout_seconds=30)
    results = []
    call = threading.Thread(target=lambda: results.append(runner.run(["import time; time.sleep(30)"])))
    call.start()
    time.sleep(0.5)
    started = time.monotonic()
    runner.terminate_all()
    call.join(5)
    assert time.monotonic() - started < 2.0 and results[0].returncode == -9
    refused = runner.run(["print('never')"])
    assert refused.error == "not run: npumon is shutting down" and refused.stdout == ""
