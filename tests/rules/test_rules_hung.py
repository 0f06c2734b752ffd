"""Hung, idle and starved chips are three different findings (chip-hung, nothing, cpu-bottleneck), and a
process stuck in D state is chip-dstate; each signal of chip-hung can keep it quiet on its own."""

from test_rules_builtin import CHIP0, HBM_TOTAL, activity, healthy_network, run

from npumon.rules.loader import load_rules
from npumon.rules.engine import RuleEngine

FIVE_MINUTES = 315  # the rules' `for: 5m` and one 15 s poll more


def hung(cpu=0.2, queue=7.0, memory=lambda elapsed: HBM_TOTAL // 2, packets=None, pids=lambda elapsed: 4000,
         aicore=0.0):
    """Chip 0 with its processes holding it, changed one signal at a time."""
    def mutate(snapshot, elapsed):
        chip = snapshot.chips[0]
        chip.aicore_ratio = aicore
        chip.hbm_used_bytes = memory(elapsed)
        chip.processes[0].pid = pids(elapsed)
        chip.extra["process_activity"] = activity(cpu)
        if packets is not None:
            chip.extra["network"] = healthy_network(counters={"roce_tx_all_pkt_num": packets(elapsed),
                                                              "roce_rx_all_pkt_num": 1000})
        snapshot.host.serving_queue_depth = queue
    return mutate


def rules_fired(mutate, seconds=FIVE_MINUTES, one_shot=False):
    findings, _ = run(mutate, seconds, one_shot=one_shot)
    return {(finding.rule, finding.subject) for finding in findings}


def test_a_hung_chip_fires_after_five_minutes_of_polls_and_not_before():
    assert ("chip-hung", CHIP0) not in rules_fired(hung(), seconds=285)
    assert rules_fired(hung()) == {("chip-hung", CHIP0)}  # and not cpu-bottleneck: it inhibits it


def test_the_finding_says_what_stood_still_and_what_to_do():
    findings, _ = run(hung(), FIVE_MINUTES)
    finding = next(f for f in findings if f.rule == "chip-hung")
    assert finding.severity == "critical" and finding.repair_action == "restart_workload"
    assert "AI Core 0%" in finding.summary and "0.2 s/min" in finding.summary
    assert "ps -o pid,stat,time,wchan:32 -p 4000" in finding.hint and "-i 0 -c 0" in finding.hint


def test_an_idle_chip_without_processes_raises_nothing():
    def idle(snapshot, elapsed):
        hung()(snapshot, elapsed)
        snapshot.chips[0].processes = []
        snapshot.chips[0].extra["process_activity"] = activity(None)
    assert rules_fired(idle) == set()


def test_a_starved_chip_is_a_cpu_bottleneck_not_hung():
    # requests queued, AI Core low, the processes busy on the host CPU feeding it
    assert rules_fired(hung(cpu=55.0, aicore=0.03)) == {("cpu-bottleneck", "host")}


def test_frozen_processes_at_zero_are_never_named_a_cpu_bottleneck():
    # chip-hung's own signals not all in yet (memory still moving): a chip whose feeders are frozen is not
    # starved by the host, so nothing names it until chip-hung can (the campaign's hung chips were first
    # reported as cpu-bottleneck for over a minute)
    moving = hung(memory=lambda elapsed: HBM_TOTAL // 2 + int(elapsed) * 4096)
    assert rules_fired(moving) == set()


def test_an_inference_server_with_nothing_queued_is_waiting_not_hung():
    assert rules_fired(hung(queue=0.0)) == set()


def test_training_without_a_serving_queue_can_hang():
    assert ("chip-hung", CHIP0) in rules_fired(hung(queue=None))


def test_memory_that_moves_is_not_hung():
    assert ("chip-hung", CHIP0) not in rules_fired(hung(memory=lambda elapsed: HBM_TOTAL // 2 + int(elapsed) * 4096))


def test_roce_traffic_is_not_hung_and_flat_traffic_is():
    assert ("chip-hung", CHIP0) not in rules_fired(hung(packets=lambda elapsed: int(elapsed * 100)))
    assert ("chip-hung", CHIP0) in rules_fired(hung(packets=lambda elapsed: 5_000_000 + int(elapsed // 60)))


def test_new_processes_start_the_count_again():
    # a restarted job (another pid) 4 minutes in: not hung for 5 minutes yet
    assert ("chip-hung", CHIP0) not in rules_fired(hung(pids=lambda elapsed: 4000 if elapsed < 240 else 4100))


def test_cpu_threshold_comes_from_the_params():
    rules, params = load_rules(params={"chip_hung_cpu_seconds_per_minute": 0.1})
    snapshot = run(hung(), 0)[1]
    assert "chip-hung" not in {f.rule for f in RuleEngine(rules, params, one_shot=True).evaluate(snapshot)}


def test_check_fires_at_once_on_what_one_pass_shows():
    def in_one_pass(mutate):
        # (`for:` is ignored in one pass: load-imbalance also sees chip 0 at 0 % among busy ones)
        return rules_fired(mutate, seconds=0, one_shot=True) - {("load-imbalance", "host")}
    assert in_one_pass(hung()) == {("chip-hung", CHIP0)}
    assert in_one_pass(hung(cpu=55.0, aicore=0.03)) == {("cpu-bottleneck", "host")}
    assert in_one_pass(hung(cpu=None)) == {("cpu-bottleneck", "host")}  # CPU time unread: not known to be hung


def test_a_process_in_d_state_for_four_minutes_is_chip_dstate_and_hides_chip_hung():
    def stuck(snapshot, elapsed):
        hung()(snapshot, elapsed)
        snapshot.chips[0].extra["process_activity"] = activity(0.0, blocked=[(4000, 30.0 + elapsed)])
    assert rules_fired(stuck, seconds=225) == set()
    findings, _ = run(stuck, FIVE_MINUTES)
    assert {(f.rule, f.subject) for f in findings} == {("chip-dstate", CHIP0)}
    finding = findings[0]
    assert finding.repair_action == "reboot_host" and "pid 4000 (python3) for 345 s" in finding.summary
    assert "/dev/davinci" in finding.hint and "npu-smi set -t reset -i 0 -c 0" in finding.hint
