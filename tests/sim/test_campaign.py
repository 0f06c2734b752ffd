"""Campaign files, composing a host's scenario from its injections, and playing a campaign on a fake clock
(npumon/sim/campaign.py). The slow test plays a small campaign on real simulated hosts and scores it."""

import json
import os
import random
import socket
import subprocess
import sys

import pytest
import yaml

from npumon.rules.loader import load_rules
from npumon.sim.campaign import (CLASSES, HOST_CONFIG, CampaignError, CampaignPlayer, check_campaign,
                                 chip_subjects, compose, dcmi_hosts, fault_fragment, fleet_dcmi_library,
                                 host_extras, load_campaign, poll_seconds, read_truth, rule_budgets, shift, subjects)
from npumon.sim.campaign_score import score
from npumon.sim.dcmi import FakeDcmiBuildError, dcmi_state_path
from npumon.sim.scenario import load_scenario
from npumon.sim.simulation import prepare_simulation

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(REPO, "campaigns")


def campaign(*injections, hosts=3, **top):
    return check_campaign(dict(top, hosts=hosts, injections=list(injections)))


@pytest.mark.parametrize("injection, problem", [
    ({"host": 1, "chip": 0, "class": "meltdown", "start": 0, "duration": 10}, "injections[0].class: unknown class"),
    ({"host": 4, "chip": 0, "class": "overheat", "start": 0, "duration": 10}, "injections[0].host: expected a number from 1 to 3"),
    ({"host": 1, "chip": 8, "class": "overheat", "start": 0, "duration": 10}, "injections[0].chip: expected a number from 0 to 7"),
    ({"host": 1, "class": "overheat", "start": 0, "duration": 10}, "injections[0].chip: class overheat takes 1 chip"),
    ({"host": 1, "chip": 0, "class": "npu-smi-hang", "start": 0, "duration": 10}, "takes no chip"),
    ({"host": 1, "chips": [0, 1], "class": "job-software-fault", "start": 0, "duration": 10}, "takes 4 chip(s)"),
    ({"host": 1, "chip": 0, "class": "overheat", "start": -1, "duration": 10}, "injections[0].start"),
    ({"host": 1, "chip": 0, "class": "overheat", "start": 0, "duration": 0}, "injections[0].duration"),
    ({"host": 1, "chip": 0, "class": "overheat", "start": 0, "duration": 10, "when": 3}, "injections[0].when: unknown key"),
])
def test_a_bad_injection_is_one_line_naming_it(injection, problem):
    with pytest.raises(CampaignError) as error:
        campaign(injection)
    assert problem in str(error.value) and "\n" not in str(error.value)


def test_overlaps_on_one_chip_or_beside_a_host_wide_fault_are_refused_and_others_allowed():
    base = {"host": 1, "class": "overheat", "start": 0, "duration": 100}
    with pytest.raises(CampaignError, match=r"injections\[1\]: overlaps injections\[0\] on host 1 chip 2"):
        campaign(dict(base, chip=2), dict(base, chip=2, start=50))
    with pytest.raises(CampaignError, match="overlaps"):
        campaign(dict(base, chip=2), {"host": 1, "class": "npu-smi-hang", "start": 99, "duration": 5})
    checked = campaign(dict(base, chip=2), dict(base, chip=3, start=50), dict(base, chip=2, start=100),
                       {"host": 2, "class": "npu-smi-hang", "start": 0, "duration": 5})
    assert [i["id"] for i in checked["injections"]] == [0, 3, 1, 2]  # by start


def test_a_file_that_is_not_a_campaign_is_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("injections: [\n")
    with pytest.raises(CampaignError, match=r"c.yaml:\d+: not valid YAML"):
        load_campaign(str(path))
    path.write_text("hosts: 2\ninjection: []\n")
    with pytest.raises(CampaignError, match="injection: unknown key"):
        load_campaign(str(path))


def test_shifted_ramps_and_steps_start_at_the_injection():
    assert shift({"start": 87, "per_minute": 1.5, "max": 105}, 600.0) == {"start": 72.0, "per_minute": 1.5, "max": 105}
    assert shift({"steps": {0: "OK", 300: "Alarm"}}, 100.0) == {"steps": {100.0: "OK", 400.0: "Alarm"}}
    assert shift({"start": 52, "wobble": 4}, 600.0) == {"start": 52, "wobble": 4}
    assert shift([{"start": 1, "per_minute": 6}, 0.25], 60.0) == [{"start": -5.0, "per_minute": 6}, 0.25]


def test_a_chip_fault_moves_to_the_injected_chip_with_its_kernel_log_lines():
    raw = yaml.safe_load(open(os.path.join(REPO, "npumon", "sim", "scenarios", "heartbeat-lost.yaml")))
    fragment = fault_fragment(CLASSES["heartbeat-lost"], raw, [6], 500.0, 30.0)
    # device 2's lines, now device 6's, from the injection on; the repeating one ends with the injection
    assert [(e["devices"], e["at"], e["count"]) for e in fragment["kmsg"]] == [([6], 500.0, 3), ([6], 506.0, 6)]
    assert fragment["overrides"] == [] and fragment["top"] == {}
    ecc = yaml.safe_load(open(os.path.join(REPO, "npumon", "sim", "scenarios", "ecc-rising.yaml")))
    (override,) = fault_fragment(CLASSES["ecc-single-bit-rising"], ecc, [4], 120.0, 60.0)["overrides"]
    assert override == {"ecc_single_bit_errors": {"start": 60.0, "per_minute": 30}, "devices": [4]}  # no double-bit


def test_every_class_composes_into_a_valid_scenario(tmp_path):
    injections, start = [], 0
    for name, fault in sorted(CLASSES.items()):
        chips = {} if fault.device is None else ({"chip": 1} if fault.chips == 1 else {"chips": [4, 5, 6, 7]})
        injections.append(dict(chips, host=1, **{"class": name}, start=start, duration=10))
        start += 10
    checked = campaign(*injections, hosts=1)
    player = CampaignPlayer(checked, ["h1"], str(tmp_path), lambda host: "", lambda host, path: None,
                            str(tmp_path / "truth.jsonl"))
    for injection in checked["injections"]:
        player._fragments[injection["id"]] = player._fragment(injection, 100.0)
        loaded = load_scenario(player._write(1, [injection]))
        assert loaded["name"] == "h1"
    assert set(rule_budgets()) == set(CLASSES)


def test_a_budget_is_for_plus_steady_readings_plus_one_poll_plus_the_pass():
    budgets = rule_budgets()
    # overheat: temperature-critical, no `for:`, read by the main table every 15 s
    assert budgets["overheat"] == 0 + 15 + 2
    # chip-hung: `for: 5m` after a minute of still memory and processes, processes polled every 30 s
    assert budgets["hung-chip"] == 300 + 60 + 30 + 2
    # heartbeat-lost: no `for:`, the 30 s job window, the kernel log every 10 s
    assert budgets["heartbeat-lost"] == 0 + 30 + 10 + 2


def test_every_host_hands_off_in_dry_run_under_its_own_name():
    extras = host_extras("campaign-07")
    assert extras["handoff"]["kubernetes"] == {"enabled": True, "dry_run": True, "node_name": "campaign-07",
                                               "interval_seconds": 10}
    assert extras["faults"]["hold_seconds"] == 120 and "poll" not in extras and "notify" not in extras
    notify = host_extras("campaign-07", "http://127.0.0.1:9/campaign-07")["notify"]
    assert notify == {"receivers": [{"name": "campaign", "type": "webhook", "url": "http://127.0.0.1:9/campaign-07"}]}


DCMI_HANG = {"host": 2, "class": "dcmi-hang", "start": 10, "duration": 30}


def test_a_dcmi_hang_is_the_hosts_and_leaves_its_scenario_healthy():
    with pytest.raises(CampaignError, match="class dcmi-hang is the host's: it takes no chip"):
        campaign(dict(DCMI_HANG, chip=1))
    with pytest.raises(CampaignError, match=r"injections\[1\]: overlaps injections\[0\] on host 2"):
        campaign({"host": 2, "chip": 3, "class": "overheat", "start": 0, "duration": 20}, DCMI_HANG)
    raw = yaml.safe_load(open(os.path.join(REPO, "npumon", "sim", "scenarios", "healthy.yaml")))
    fragment = fault_fragment(CLASSES["dcmi-hang"], raw, [], 500.0, 30.0)
    # npu-smi answers as on a healthy host: the hang is the library's alone (its faults, set by the player)
    assert compose(raw, [fragment], "x") == compose(raw, [], "x")
    assert subjects({"class": "dcmi-hang", "chips": []}) == ["host"] and not CLASSES["dcmi-hang"].isolates


def test_only_a_host_with_a_dcmi_hang_runs_the_dcmi_backend_on_the_fleets_library():
    checked = campaign({"host": 1, "chip": 3, "class": "overheat", "start": 0, "duration": 20}, DCMI_HANG,
                       dict(DCMI_HANG, start=100))
    assert dcmi_hosts(checked) == [2]
    extras = host_extras("campaign-02", dcmi_library="/cache/libdcmi-1.so")
    assert extras["collect"] == {"backend": "dcmi"}
    assert extras["dcmi"] == {"library": "/cache/libdcmi-1.so", "timeout_seconds": 10.0}
    assert "collect" not in host_extras("campaign-01") and "dcmi" not in host_extras("campaign-01")
    built = []
    assert fleet_dcmi_library(checked, build=lambda: built.append(1) or "/cache/libdcmi-1.so") == "/cache/libdcmi-1.so"
    assert built == [1]  # once for the fleet
    assert fleet_dcmi_library(campaign({"host": 1, "chip": 3, "class": "overheat", "start": 0, "duration": 20}),
                              build=lambda: pytest.fail("built for a fleet that reads npu-smi")) is None


def test_a_dcmi_hang_that_cannot_build_the_library_is_one_line():
    def no_compiler():
        raise FakeDcmiBuildError("cannot build the simulated libdcmi.so: no C compiler (set CC or install gcc)")
    checked = campaign({"host": 1, "chip": 3, "class": "overheat", "start": 0, "duration": 20}, DCMI_HANG)
    with pytest.raises(CampaignError) as error:
        fleet_dcmi_library(checked, "c.yaml", build=no_compiler)
    assert str(error.value) == ("c.yaml: injections[1].class: dcmi-hang needs the simulated libdcmi.so: cannot build "
                                "the simulated libdcmi.so: no C compiler (set CC or install gcc)")


def test_fleet_sim_without_a_compiler_refuses_a_dcmi_hang_in_one_line(cli, tmp_path, monkeypatch):
    path = tmp_path / "dcmi.yaml"
    path.write_text("hosts: 2\ninjections:\n  - {host: 2, class: dcmi-hang, start: 0, duration: 90}\n")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = cli("fleet-sim", "--campaign", str(path), "--no-prometheus", "--dir", str(tmp_path / "run"))
    assert result.returncode == 2 and not (tmp_path / "run").exists()
    assert result.stderr == ("npumon: --campaign: {}: injections[0].class: dcmi-hang needs the simulated libdcmi.so: "
                             "cannot build the simulated libdcmi.so: no C compiler (set CC or install gcc)\n"
                             .format(path))


def test_a_dcmi_hangs_budget_is_the_sweep_its_deadline_and_the_rules_for():
    # the DCMI sweep runs at the main table's interval and is down once it outlives dcmi.timeout_seconds
    assert poll_seconds(HOST_CONFIG, CLASSES["dcmi-hang"].poll) == 15 + 10.0
    source_down = next(rule for rule in load_rules()[0] if rule.id == "source-down")
    assert rule_budgets()["dcmi-hang"] == source_down.for_seconds + 25.0 + 2.0


def test_subjects_are_the_chips_or_the_host():
    overheat = {"class": "overheat", "chips": [3]}
    assert subjects(overheat) == ["npu3/chip0"]
    job = {"class": "job-software-fault", "chips": [0, 1, 2, 3]}
    assert subjects(job) == ["host"]
    assert chip_subjects(job) == ["npu0/chip0", "npu1/chip0", "npu2/chip0", "npu3/chip0"]
    assert not CLASSES["job-software-fault"].isolates and CLASSES["card-drop"].isolates


class FakeClock:
    def __init__(self):
        self.now = 5000.0

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_playing_switches_hosts_at_starts_and_ends_and_writes_the_truth(tmp_path):
    clock = FakeClock()
    sims = {}
    for host in (1, 2):
        sims[host] = str(tmp_path / "sim{}".format(host))
        prepare_simulation(sims[host], time_scale=2.0)
    checked = campaign({"host": 1, "chip": 3, "class": "overheat", "start": 20, "duration": 40},
                       {"host": 2, "class": "serving-starved-cpu", "start": 30, "duration": 20},
                       {"host": 1, "chip": 2, "class": "heartbeat-lost", "start": 40, "duration": 40},
                       hosts=2, time_scale=2.0, settle=10)
    switched = []
    truth = str(tmp_path / "truth.jsonl")
    player = CampaignPlayer(checked, ["h1", "h2"], str(tmp_path / "scenarios"), sims.__getitem__,
                            lambda host, path: switched.append((clock.now, host, load_scenario(path)["description"])),
                            truth, clock=clock.time, sleep=clock.sleep)
    player.write_healthy()
    ended = player.play()
    assert switched == [
        (5010.0, 1, "campaign host: overheat"), (5015.0, 2, "campaign host: serving-starved-cpu"),
        (5020.0, 1, "campaign host: overheat, heartbeat-lost"), (5025.0, 2, "campaign host: healthy"),
        (5030.0, 1, "campaign host: heartbeat-lost"), (5040.0, 1, "campaign host: healthy")]
    assert ended == 5045.0
    header, injections = read_truth(truth)
    assert header["hosts"] == ["h1", "h2"] and header["time_scale"] == 2.0
    first = injections[0]
    assert (first["host"], first["subjects"], first["start"], first["end"]) == ("h1", ["npu3/chip0"], 5010.0, 5030.0)
    assert first["chip_subjects"] == ["npu3/chip0"] and first["isolates"]
    assert first["expect"]["rules"] == ["temperature-critical"]
    # the kernel-log entry of the ended heartbeat fault stays in the healthy host's scenario (its lines were written)
    final = load_scenario(player.scenario_file(1))
    assert len(final["kmsg"]) == 2 and final["chips"].get("overrides", []) == []
    lines = [json.loads(line) for line in open(truth)]
    assert [line["type"] for line in lines] == ["campaign", "injection", "injection", "injection", "end"]


def _hangs(sim_dir):
    lines = open(dcmi_state_path(sim_dir)).read().splitlines()
    return "fault.hang=*" in lines


def test_a_dcmi_hang_hangs_its_hosts_library_for_its_duration_and_is_scored(tmp_path):
    clock = FakeClock()
    sims = {}
    for host in (1, 2):
        sims[host] = str(tmp_path / "sim{}".format(host))
        prepare_simulation(sims[host])
    checked = campaign({"host": 1, "chip": 3, "class": "overheat", "start": 0, "duration": 20}, DCMI_HANG,
                       dict(DCMI_HANG, start=60, duration=20), hosts=2, settle=10)
    seen = []
    truth = str(tmp_path / "truth.jsonl")
    player = CampaignPlayer(checked, ["h1", "h2"], str(tmp_path / "scenarios"), sims.__getitem__,
                            lambda host, path: seen.append((clock.now - 5000.0, host, _hangs(sims[host]))),
                            truth, clock=clock.time, sleep=clock.sleep)
    player.write_healthy()
    player.play()
    # the library hangs from each start to its end, on its host only; npu-smi's host never gets DCMI faults
    assert seen == [(0.0, 1, False), (10.0, 2, True), (20.0, 1, False), (40.0, 2, False), (60.0, 2, True),
                    (80.0, 2, False)]
    assert not os.path.exists(os.path.join(sims[1], "dcmi-faults.json"))
    header, injections = read_truth(truth)
    assert header["dcmi_hosts"] == ["h2"]
    hang = injections[1]
    assert (hang["class"], hang["subjects"], hang["chip_subjects"], hang["isolates"]) == ("dcmi-hang", ["host"], [],
                                                                                           False)
    # scored like the others: source-down on the host names it; a chip taken out of service meanwhile is wrong
    start = hang["start"]
    events = [{"host": "h2", "time": start + 80.0, "kind": "finding_fired", "subject": "host", "rule": "source-down",
               "repair_action": None, "new": None},
              {"host": "h2", "time": start + 80.0, "kind": "verdict_changed", "subject": "host", "rule": None,
               "repair_action": None, "new": "degraded"},
              {"host": "h2", "time": start + 85.0, "kind": "verdict_changed", "subject": "npu2/chip0", "rule": None,
               "repair_action": None, "new": "out_of_service"}]
    report = score([hang], events, ["h1", "h2"])
    row = report["injections"][0]
    assert row["detected"] and row["right_rule"] and row["right_action"] and row["within_budget"]
    assert report["overall"]["false_isolations"] == 1 and report["overall"]["false_positives"] == 0


def test_the_shipped_campaigns_are_valid():
    small = load_campaign(os.path.join(SHIPPED, "small.yaml"))
    full = load_campaign(os.path.join(SHIPPED, "fleet-50.yaml"))
    assert full["hosts"] == 50 and 190 <= len(full["injections"]) <= 210
    assert max(i["end"] for i in full["injections"]) <= 1800
    assert {i["class"] for i in full["injections"]} == set(CLASSES)
    assert len(small["injections"]) >= 4 and "dcmi-hang" in {i["class"] for i in small["injections"]}
    scaled = load_campaign(os.path.join(SHIPPED, "fleet-12-scaled.yaml"))
    assert "dcmi-hang" in {i["class"] for i in scaled["injections"]}


def test_fleet_sim_refuses_a_bad_campaign_in_one_line_before_starting_anything(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts: 2\ninjections:\n  - {host: 1, class: overheat, start: 0, duration: 60}\n")
    result = cli("fleet-sim", "--campaign", str(bad), "--no-prometheus", "--dir", str(tmp_path / "run"))
    assert result.returncode == 2
    assert result.stderr.strip() == ("npumon: --campaign: {}: injections[0].chip: class overheat takes 1 chip(s)"
                                     .format(bad))
    result = cli("fleet-sim", "--campaign", os.path.join(SHIPPED, "small.yaml"), "--hosts", "2", "--no-prometheus",
                 "--dir", str(tmp_path / "run"))
    assert result.returncode == 2 and "the campaign names hosts up to 6" in result.stderr
    assert not (tmp_path / "run").exists()


def _free_base_port(hosts):
    bases = list(range(20000, 32000 - hosts, 100))  # below Linux's ephemeral ports (32768-60999)
    random.shuffle(bases)
    for base in bases:
        try:
            for port in range(base + 1, base + hosts + 1):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    pytest.skip("no free block of ports on 127.0.0.1")


@pytest.mark.slow
def test_a_small_campaign_is_found_without_false_positives_or_isolations(tmp_path):
    directory = tmp_path / "run"
    small = load_campaign(os.path.join(SHIPPED, "small.yaml"))
    result = subprocess.run(
        [sys.executable, "-m", "npumon.cli.main", "fleet-sim", "--campaign", os.path.join(SHIPPED, "small.yaml"),
         "--no-prometheus", "--dir", str(directory), "--base-port", str(_free_base_port(small["hosts"]))],
        capture_output=True, text=True, timeout=900, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.load(open(directory / "score.json"))
    overall = report["overall"]
    assert overall["recall"] == 1.0, result.stdout
    assert overall["false_positives"] == 0, (report["false_positives"], result.stdout)
    assert overall["false_isolations"] == 0, (report["false_isolations"], result.stdout)
