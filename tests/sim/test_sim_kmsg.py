"""The simulated kernel log (npumon/sim/kmsg.py) and the fault scenarios: on the fake clock every new rule
fires on the scenario made for it (kmsg lines in the driver's formats, the chip-count check, the escalations),
`healthy` stays quiet, and a bad `kmsg:` entry is a one-line error."""

import json
import os

import pytest

from clocked_host import ClockedHost
from npumon.settings import parse_config
from npumon.faults.patterns import load_patterns, match_line
from npumon.sim import ScenarioError, prepare_simulation
from npumon.sim.kmsg import KMSG_FILE, LINES, due
from npumon.sim.scenario import load_scenario
from npumon.sim.state import STATE_ENV

CONFIG = """\
state_dir: {state}
probe: {{enabled: false}}
"""
# scenario -> the findings (rule, subject) it must raise on the fake clock within `seconds`
SCENARIOS = [
    # three driver wordings of the loss, each on its own chip
    ("heartbeat-lost", {("driver-device-fault", "npu2/chip0"), ("driver-fault-repeating", "npu2/chip0"),
                        ("driver-device-fault", "npu5/chip0"), ("driver-device-fault", "npu6/chip0")}, 60),
    # the event lines name no device: they are npu3's, the chip npu-smi reports their code on
    ("hbm-ecc-fault", {("health-alarm", "npu3/chip0"), ("ecc-uncorrectable", "npu3/chip0"),
                       ("driver-transient-fault", "npu3/chip0"), ("driver-fault-repeating", "npu3/chip0")}, 600),
    ("card-drop", {("chips-missing", "host"), ("driver-host-device-fault", "host"),
                   ("driver-host-fault-repeating", "host")}, 60),
    ("link-down-escalation", {("network-link-down", "npu5/chip0"), ("network-link-down-long", "npu5/chip0")}, 120),
    ("kmsg-storm", {("driver-transient-fault", "npu0/chip0")}, 60),
    ("job-software-fault", {("job-fault", "host")}, 30),
]
# the findings about attribution and jobs: a scenario raises them only where it names them
ATTRIBUTION_RULES = {"job-fault", "driver-unattributed-fault"}
NEW_RULES = {"driver-fault-repeating", "driver-host-fault-repeating", "chips-missing", "network-link-down-long"}


def clocked(tmp_path, scenario):
    sim = prepare_simulation(str(tmp_path / "sim"), scenario)
    config = parse_config(CONFIG.format(state=tmp_path / "state"), "test.yaml")
    return ClockedHost(config, sim)


def fired_within(host, wanted, seconds):
    seen = set()
    until = host.clock() + seconds
    while host.clock() < until and not wanted <= seen:
        seen |= {(finding.rule, finding.subject) for finding in host.step()}
    return seen


@pytest.mark.parametrize("scenario,wanted,seconds", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_each_fault_scenario_raises_its_findings_on_the_fake_clock(tmp_path, scenario, wanted, seconds):
    host = clocked(tmp_path, scenario)
    try:
        seen = fired_within(host, wanted, seconds)
    finally:
        host.close()
    assert wanted <= seen, "missing {}".format(sorted(wanted - seen))
    assert {rule for rule, _ in seen} & ATTRIBUTION_RULES <= {rule for rule, _ in wanted}, sorted(seen)


def test_the_job_fault_names_the_four_chips_and_none_of_them_gets_a_finding_of_its_own(tmp_path):
    host = clocked(tmp_path, "job-software-fault")
    try:
        host.run_for(60)
        findings = list(host.findings)
        job_faults = host.snapshot.host.extra["job_faults"]
    finally:
        host.close()
    assert [(f.rule, f.subject, f.repair_action, f.level) for f in findings if f.rule.startswith(("driver-", "job-"))] \
        == [("job-fault", "host", "restart_workload", None)]
    job_fault, = job_faults
    assert (job_fault["job"], job_fault["code"], job_fault["chips"]) == (
        "pid 31337", "B4060007", ["npu0/chip0", "npu1/chip0", "npu2/chip0", "npu3/chip0"])
    assert job_fault["lines"] == 12 and job_fault["seconds"] == 1.0  # three lines each, half a second apart

def test_every_new_rule_fires_in_some_scenario():
    assert NEW_RULES <= {rule for _, wanted, _ in SCENARIOS for rule, _ in wanted}


def test_healthy_has_the_kernel_log_on_and_raises_no_fault_finding(tmp_path):
    host = clocked(tmp_path, "healthy")
    try:
        host.run_for(120)
        sources = host.snapshot.sources
    finally:
        host.close()
    assert sources["kmsg"].ok and sources["chip-count"].ok
    assert not [f for f in host.findings if f.rule.startswith(("driver-", "chips-", "network-", "job-"))]
    assert host.snapshot.host.extra["chip_count"]["expected"] == 8


def test_the_storm_is_counted_not_kept_and_its_suppressed_lines_show(tmp_path):
    host = clocked(tmp_path, "kmsg-storm")
    try:
        host.run_for(150)  # the storm, then 20,000 lines a read (faults.max_records_per_poll) until all are in
        stats = host.snapshot.host.extra["kmsg"]
        faults = host.snapshot.chips[0].extra["driver_faults"]
        text = host.metrics()
    finally:
        host.close()
    assert stats["matched"] == 100000
    # 10 lines a minute of the fault are kept; the reads span two or three rate windows
    assert faults[0]["count"] == 100000 and 100000 - 30 <= faults[0]["suppressed"] <= 100000 - 10
    assert "npumon_kmsg_lines_suppressed {}.0".format(stats["suppressed"]) in text
    assert stats["suppressed"] == faults[0]["suppressed"]


def test_the_link_down_scenario_without_a_long_outage_does_not_escalate(tmp_path):
    host = clocked(tmp_path, "link-down")  # down at most a minute before each poll
    try:
        seen = fired_within(host, {("network-link-down-long", "npu5/chip0")}, 300)
    finally:
        host.close()
    assert ("network-link-down", "npu5/chip0") in seen
    assert ("network-link-down-long", "npu5/chip0") not in seen


def test_every_simulated_line_is_matched_by_the_shipped_patterns():
    patterns = load_patterns()
    classes = {}
    for name, (_, text) in LINES.items():
        fault = match_line(text.format(device=3, n=1, code="80E01801", code_lower="b4060007"), patterns)
        classes[name] = None if fault is None else (fault.fault_class, fault.device)
    assert None not in classes.values(), classes
    assert classes["heartbeat_lost"] == ("heartbeat_lost", 3) and classes["heartbeat_lost_old"] == ("heartbeat_lost", 3)
    assert classes["fault_event"] == ("memory_fault_event", None)  # the device event log names no device
    assert classes["heartbeat_lost_module_first"] == ("heartbeat_lost", 3)
    assert classes["ts_exception"] == ("ts_exception", 3)


def test_lines_come_as_the_scenario_clock_runs():
    entry = {"at": 6.0, "every": 6.0, "count": 3}
    assert [due(entry, t) for t in (0, 5.9, 6, 11.9, 12, 100)] == [0, 0, 1, 1, 2, 3]
    assert due({"at": 0.0, "every": 0.0, "count": 5}, 0) == 5


def test_the_log_is_written_once_whatever_the_number_of_readers(tmp_path):
    host = clocked(tmp_path, "heartbeat-lost")
    try:
        host.run_for(60)
    finally:
        host.close()
    with open(os.path.join(str(tmp_path / "sim"), KMSG_FILE), encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    seqs = [int(line.split(",")[1]) for line in lines]
    assert seqs == list(range(1, len(lines) + 1))
    # 3 at the start and the old-format line of device 5, then one every 6 s up to the last read before 60 s
    assert 3 + 1 + 5 <= len(lines) <= 3 + 1 + 10


@pytest.mark.parametrize("entry,message", [
    ("{line: nonsense, devices: [1]}", "kmsg[0].line: must be one of"),
    ("{line: fault_event, devices: [1]}", "kmsg[0].code: fault_event and ts_exception lines need a code"),
    ("{line: heartbeat_lost}", "kmsg[0].devices: missing"),
    ("{line: dma_timeout, devices: [0], count: 2000000}", "kmsg[0].count: at most 1000000"),
])
def test_a_bad_kmsg_entry_is_one_line_naming_file_line_and_key(tmp_path, entry, message):
    path = tmp_path / "bad.yaml"
    path.write_text("description: x\nproduct: atlas-800i-a2\nkmsg:\n  - " + entry + "\n")
    with pytest.raises(ScenarioError) as raised:
        load_scenario(str(path))
    assert message in str(raised.value) and str(path) + ":4:" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_every_fault_scenario_has_a_description():
    for name, _, _ in SCENARIOS:
        assert load_scenario(name)["description"]


@pytest.mark.integration
def test_check_on_the_card_drop_scenario_reports_the_missing_card_with_its_repair_action(cli):
    result = cli("check", "--simulate=card-drop", "--json", env={"NPUMON_SIM_LATENCY_SCALE": "0"})  # in-process
    document = json.loads(result.stdout)
    findings = {finding["rule"]: finding for finding in document["findings"]}
    assert result.returncode == 2
    assert findings["chips-missing"]["repair_action"] == "inspect_hardware"
    assert "not in npu-smi's table: 0000:42:00.0" in findings["chips-missing"]["summary"]
    assert findings["driver-host-device-fault"]["level"] == "RestartNPU"
    assert len(document["chips"]) == 7


def test_the_dropped_card_is_gone_from_the_table_and_refuses_queries_but_stays_on_the_pci_bus(tmp_path):
    from npumon.sim.npusmi import respond, sim_host
    from npumon.sim.state import read_state
    from npumon.sources.chipcount import npu_pci_devices

    sim = prepare_simulation(str(tmp_path / "sim"), "card-drop")
    host = sim_host(read_state(sim.env[STATE_ENV]), 0.0)
    assert [slot.npu for slot, _ in host.chips] == list(range(7))
    text, status = respond(["info", "-t", "health", "-i", "7", "-c", "0"], host)
    assert text.startswith("Invalid card id.") and status != 0
    assert len(npu_pci_devices(sim.root)) == 8


def test_every_scenario_with_kernel_log_lines_is_checked_for_the_attribution_findings():
    """The others write no kernel log line, so no fault of theirs can be a job's or unattributed."""
    from npumon.sim.scenario import list_scenarios

    with_lines = {name for name in list_scenarios() if load_scenario(name).get("kmsg")}
    assert with_lines and with_lines <= {name for name, _, _ in SCENARIOS}


@pytest.mark.integration
def test_check_on_the_job_scenario_raises_one_job_fault_and_nothing_on_the_chips(cli):
    # --no-probe: only the kernel log's findings are asserted, and the probe starts a child process per chip
    result = cli("check", "--full", "--no-probe", "--simulate=job-software-fault", "--json",
                 env={"NPUMON_SIM_LATENCY_SCALE": "0"})
    document = json.loads(result.stdout)
    kernel_log = [f for f in document["findings"] if f["rule"].startswith(("driver-", "job-"))]
    assert [(f["rule"], f["subject"], f["repair_action"]) for f in kernel_log] == [
        ("job-fault", "host", "restart_workload")]
    assert "npu0/chip0, npu1/chip0, npu2/chip0, npu3/chip0" in kernel_log[0]["summary"]
    assert all(fault["job"] == "pid 31337" for chip in document["chips"][:4] for fault in chip["driver_faults"])


@pytest.mark.integration
def test_check_on_the_hbm_ecc_scenario_suggests_no_missing_card(cli):
    result = cli("check", "--simulate=hbm-ecc-fault", "--json", env={"NPUMON_SIM_LATENCY_SCALE": "0"})
    findings = json.loads(result.stdout)["findings"]
    assert not [f for f in findings if f["subject"] == "host" and f["rule"].startswith("driver-")]
    assert not [f for f in findings if "missing card" in f["hint"]]
    repeating, = [f for f in findings if f["rule"] == "driver-fault-repeating"]
    assert (repeating["subject"], repeating["level"]) == ("npu3/chip0", "ManuallySeparateNPU")
