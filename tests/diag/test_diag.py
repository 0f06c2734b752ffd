"""`npumon diag` against the simulated host, through the same code path as hardware: level 1 on the deployment
scenarios, levels 2 and 3 on diag-faults, whose chips each hide one fault (sim/scenarios/diag-faults.yaml).
The simulated device keeps its own clock and NPUMON_SIM_LATENCY_SCALE=0 (conftest) makes nothing wait."""

import json
import os
import shutil
import time

import pytest
import yaml

from npumon.cli.main import main
from npumon.diag.deploy import environment_problems, parse_environ
from npumon.diag.expected import pcie_bandwidth
from npumon.diag.judge import DEFAULT_THRESHOLDS, ChipRun, judge
from npumon.services.events.store import EventStore, events_path
from npumon.sim.atc import ATC_LOG
from npumon.sim.scenario import scenario_path

SMALL = ["--item-seconds", "0.5", "--hbm-bytes", str(32 * 1048576)]
BUILT = "MatMul fp16 [16,16] via single-op model built by ATC in "
CACHED = "MatMul fp16 [16,16] via cached single-op model "
MODELS = "Ascend910B3-8.1.RC1-MatMul-float16-16x16-MatMul-float16-4096x4096"


def diag(capsys, *argv):
    code = main(["diag"] + list(argv))
    return code, capsys.readouterr().out


def findings_of(document):
    return {(finding["subject"], finding["rule"]) for finding in document["findings"]}


def test_level_1_passes_on_a_healthy_host_and_fails_on_a_misconfigured_one(capsys):
    code, out = diag(capsys, "-r", "1", "--simulate")
    assert code == 0, out
    assert out.startswith("NPU DIAG OK - level 1 passed on 8 of 8 chips")
    code, out = diag(capsys, "-r", "1", "--simulate=host-misconfigured", "--json")
    document = json.loads(out)
    assert code == 2 and document["status"] == "critical"
    assert findings_of(document) == {("host", "device-files-missing"), ("host", "versions-incompatible"),
                                     ("host", "max-map-count-low"), ("npu3/chip0", "pcie-degraded"),
                                     ("host", "numa-balancing-enabled"), ("npu5/chip0", "env-log-level-verbose"),
                                     ("npu6/chip0", "env-log-to-stdout"), ("npu6/chip0", "env-hccl-timeouts-default"),
                                     ("npu2/chip0", "hugepages-exhausted")}
    verbose = [f for f in document["findings"] if f["rule"] == "env-log-level-verbose"][0]
    assert verbose["summary"] == "process 2290641 (VLLMEngineCore): ASCEND_GLOBAL_LOG_LEVEL=1 (info)"
    assert verbose["repair_action"] == "restart_workload"
    code, out = diag(capsys, "-r", "1", "--simulate=board-incompatible", "--json")  # needs the board query
    assert code == 2 and findings_of(json.loads(out)) == {("npu2/chip0", "board-incompatible")}


def test_level_2_skips_chips_a_process_holds_unless_forced(capsys):
    code, out = diag(capsys, "-r", "2", "--simulate", *SMALL)  # the healthy host serves on every chip
    assert code == 3 and out.startswith("NPU DIAG UNKNOWN - level 2 tested 0 of 8 chips (8 held by a process")
    code, out = diag(capsys, "-r", "2", "--simulate=host-misconfigured", "--json", *SMALL)
    document = json.loads(out)
    skipped = {subject for subject, rule in findings_of(document) if rule == "diag-chip-skipped"}
    assert skipped == {"npu{}/chip0".format(npu) for npu in range(8)}
    assert document["results"] == []
    code, out = diag(capsys, "-r", "2", "--simulate=host-misconfigured", "--json", "--force", *SMALL)
    document = json.loads(out)
    assert {row["subject"] for row in document["results"]} == skipped
    assert not any(rule == "diag-chip-skipped" for _, rule in findings_of(document))


def test_level_2_finds_each_injected_fault_on_its_chip_with_figures_against_expected(capsys, tmp_path):
    code, out = diag(capsys, "-r", "2", "--simulate=diag-faults", "--json", "--textfile", str(tmp_path), *SMALL)
    document = json.loads(out)
    assert code == 2
    assert findings_of(document) == {
        ("npu1/chip0", "diag-compute-wrong"), ("npu2/chip0", "diag-hbm-pattern-errors"),
        ("npu3/chip0", "diag-pcie-bandwidth-low"), ("npu3/chip0", "pcie-degraded"),
        ("npu4/chip0", "diag-aicore-hang")}
    pattern = [f for f in document["findings"] if f["rule"] == "diag-hbm-pattern-errors"][0]
    # the simulated copy flips 5 bytes of its destination, the second 32 MiB region, the first 4,095 bytes in
    assert "5 of 67108864 bytes came back different (first at offset {})".format(32 * 1048576 + 4095) in \
        pattern["summary"]
    wrong = [f for f in document["findings"] if f["rule"] == "diag-compute-wrong"][0]
    assert "element [3][11] is 33, expected 32" in wrong["summary"] and wrong["repair_action"] == "reset_npu"
    rows = {(row["subject"], row["item"]): row for row in document["results"]}
    slow, full = rows[("npu3/chip0", "h2d")], rows[("npu0/chip0", "h2d")]
    # Gen5 x16 carries 63.0 GB/s raw; the simulated copy engine reaches 82 % of its link: Gen3 x8 7.9 GB/s
    assert slow["expected"] == pytest.approx(63.02e9, rel=1e-3) == full["expected"]
    assert slow["ratio"] == pytest.approx(0.82 * pcie_bandwidth(8.0, 8) / pcie_bandwidth(32.0, 16), rel=0.02)
    assert full["ratio"] == pytest.approx(0.82, rel=0.03)
    assert rows[("npu0/chip0", "matmul")]["expected"] == 313e12
    assert 0.5 < rows[("npu0/chip0", "matmul")]["ratio"] < 0.8
    # no --op-model-dir: one child built the MatMul models with the simulated ATC, the others waited and loaded them
    computed = [row["message"] for row in document["results"] if row["item"] == "compute" and row["state"] == "ok"]
    assert len(computed) == 6 and all(message.endswith(MODELS) for message in computed)
    assert sum(message.startswith(BUILT) for message in computed) <= 1  # npu1 or npu4 may have built them
    assert all(message.startswith((BUILT, CACHED)) for message in computed)
    text = (tmp_path / "npumon_diag.prom").read_text()
    assert 'npumon_diag_item_passed{chip="0",item="h2d",level="2",npu="3"} 0.0' in text
    assert 'npumon_diag_item_passed{chip="0",item="h2d",level="2",npu="0"} 1.0' in text
    assert 'npumon_diag_findings{level="2",severity="critical"} 4.0' in text


# Level 3 on all eight chips, and three level-2 runs: 8 and 24 diag children, 13 s and 18 s of CPU, the two
# heaviest tests of the default suite; in the slow suite (.ci/run runs it on every change). Level 2's faults, its
# held chips and a level-3 run cut by --timeout stay in the default run.
@pytest.mark.slow
def test_level_3_finds_throttling_and_a_failed_chip_to_chip_copy_and_records_an_event(capsys, tmp_path):
    with open(scenario_path("diag-faults"), encoding="utf-8") as handle:
        scenario = yaml.safe_load(handle)
    for override in scenario["chips"]["overrides"]:  # throttle soon after the short loads of a test begin
        if "throttle_after_seconds" in override["diag"]:
            override["diag"]["throttle_after_seconds"] = 1
    path = tmp_path / "diag-faults-fast.yaml"
    path.write_text(yaml.safe_dump(scenario))
    state = tmp_path / "sim"
    code, out = diag(capsys, "-r", "3", "--simulate", str(path), "--sim-state", str(state), "--json",
                     "--sustained-seconds", "3", *SMALL)
    document = json.loads(out)
    found = findings_of(document)
    assert ("npu5/chip0", "diag-throttling") in found and ("npu6/chip0", "diag-p2p-failed") in found
    assert not any(subject in ("npu0/chip0", "npu7/chip0") for subject, _ in found)
    throttled = [row for row in document["results"] if row["subject"] == "npu5/chip0"
                 and row["item"] == "matmul_sustained"][0]
    assert throttled["state"] == "ok"
    p2p = {row["subject"]: row for row in document["results"] if row["item"] == "p2p"}
    assert p2p["npu6/chip0"]["state"] == "failed" and p2p["npu0/chip0"]["state"] == "ok"
    store = EventStore(events_path(str(state / "npumon-state")), readonly=True)
    events = [event for event in store.query() if event.kind == "diag_completed"]
    assert len(events) == 1 and events[0].severity == "critical"
    assert "diag level 3 critical" in events[0].message


@pytest.mark.slow  # see above
def test_the_matmul_models_are_built_once_and_the_next_run_loads_them_from_the_cache(capsys, tmp_path):
    state = tmp_path / "sim"
    runs, atc_runs = [], []
    for _ in range(2):
        code, out = diag(capsys, "-r", "2", "--simulate", "--sim-state", str(state), "--force", "--json", *SMALL)
        assert code == 0, out
        runs.append([row["message"] for row in json.loads(out)["results"] if row["item"] == "compute"])
        atc_runs.append((state / ATC_LOG).read_text().splitlines())
    assert atc_runs == [["Ascend910B3 built"]] * 2  # the simulated ATC ran once, in the first run
    cache = state / "npumon-state" / "probe-ops"
    assert sorted(os.listdir(cache)) == [MODELS, MODELS + ".lock"]  # no failure marker, no scratch left
    first, second = runs
    assert len(first) == 8 and sum(message.startswith(BUILT) for message in first) == 1
    assert sum(message.startswith(CACHED) for message in first) == 7
    assert len(second) == 8 and all(message.startswith(CACHED) for message in second)  # ATC not run again
    # --op-model-dir overrides the builder: those models, nothing built or cached
    mine = tmp_path / "mine"
    shutil.copytree(str(cache / MODELS), str(mine))
    other = tmp_path / "other"
    code, out = diag(capsys, "-r", "2", "--simulate", "--sim-state", str(other), "--force", "--json",
                     "--op-model-dir", str(mine), *SMALL)
    rows = [row for row in json.loads(out)["results"] if row["item"] in ("compute", "matmul")]
    assert code == 0 and len(rows) == 16 and all(row["state"] == "ok" for row in rows)
    assert {row["message"] for row in rows if row["item"] == "compute"} == {
        "MatMul fp16 [16,16] via the single-op models in " + str(mine)}
    assert not (other / "npumon-state" / "probe-ops").exists()


def test_without_an_operator_library_the_compute_items_say_compute_unavailable_and_the_rest_pass(capsys):
    code, out = diag(capsys, "-r", "2", "--simulate=no-operator-library", "--force", "--json", *SMALL)
    document = json.loads(out)
    assert code == 0 and document["status"] == "ok"
    states = {(row["item"], row["state"]) for row in document["results"]}
    assert states == {("compute", "unavailable"), ("matmul", "unavailable"), ("h2d", "ok"), ("d2h", "ok"),
                      ("hbm_pattern", "ok")}
    unavailable = [row["message"] for row in document["results"] if row["state"] == "unavailable"]
    assert len(unavailable) == 16
    assert all(message.startswith("compute unavailable: op-model: ATC could not build MatMul for Ascend910B3")
               and message.endswith("; aclop: no operator API library") for message in unavailable)
    assert {finding["rule"] for finding in document["findings"]} == {"diag-item-unavailable"}


def test_the_parser_refuses_an_unknown_level_or_a_tiny_hbm_size():
    with pytest.raises(SystemExit):
        main(["diag", "-r", "4", "--simulate"])
    with pytest.raises(SystemExit):
        main(["diag", "-r", "2", "--hbm-bytes", "12", "--simulate"])


def test_environment_problems_of_an_npu_process():
    variables = parse_environ(b"ASCEND_GLOBAL_LOG_LEVEL=1\0ASCEND_SLOG_PRINT_TO_STDOUT=1\0WORLD_SIZE=32\0"
                              b"LOCAL_WORLD_SIZE=8\0garbage\0")
    assert [rule for rule, _, _ in environment_problems(variables)] == [
        "env-log-level-verbose", "env-log-to-stdout", "env-hccl-timeouts-default"]
    assert environment_problems({"ASCEND_GLOBAL_LOG_LEVEL": "3", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"}) == []
    assert environment_problems({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "HCCL_EXEC_TIMEOUT": "1800"}) == []


def test_a_child_killed_at_its_deadline_names_the_item_that_never_finished():
    run = ChipRun("npu2/chip0", 2, None, None, None, error="95 s", stuck_item="matmul")
    (finding,) = judge([run], DEFAULT_THRESHOLDS, now=0.0)
    assert finding.rule == "diag-aicore-hang" and finding.summary.startswith("matmul never completed")
    (finding,) = judge([run._replace(stuck_item="h2d")], DEFAULT_THRESHOLDS, now=0.0)
    assert finding.rule == "diag-item-hang" and finding.labels == {"item": "h2d"}


def test_the_sampler_sees_a_chip_under_diag_load_hot_and_throttled_through_npu_smi(tmp_path):
    from npumon.diag.run import _Sampler
    from npumon.settings import Config
    from npumon.sim import prepare_simulation, simulated_target, simulation_config
    from npumon.sim.diag_load import mark_load

    sim = prepare_simulation(str(tmp_path), "diag-faults")
    config = simulation_config(Config(), str(tmp_path))
    mark_load(str(tmp_path), 5, 0.6, time.time() + 3600)  # npu5 throttles under the load for the whole test
    mark_load(str(tmp_path), 0, 1.0, time.time() + 3600)
    sampler = _Sampler(config, simulated_target(sim), interval=0.01)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sampler._samples.get("npu0/chip0", {}).get("samples", 0) < 1:
        time.sleep(0.05)  # polling for the first full pass, not a fixed wait
    samples = sampler.stop()
    assert samples["npu5/chip0"]["aicore_freq_mhz_min"] == 1080 and samples["npu5/chip0"]["temperature_celsius_max"] == 96
    assert samples["npu0/chip0"]["aicore_freq_mhz_min"] == 1800 and samples["npu0/chip0"]["power_watts_max"] == 310
    assert samples["npu1/chip0"]["power_watts_max"] == 90  # not under load
    run = ChipRun("npu5/chip0", 5, None, None, {"items": {}}, samples=dict(samples["npu5/chip0"],
                                                                          aicore_freq_mhz_max=1800))
    (finding,) = judge([run], DEFAULT_THRESHOLDS, now=0.0)
    assert finding.rule == "diag-clock-dropped"
    assert "1080 MHz (from 1800)" in finding.summary and "temperature up to 96 C" in finding.summary


@pytest.mark.realistic_latency  # the loads take device time in wall time (sleeping), as on a chip, not CPU
def test_a_timeout_below_the_loads_ends_every_child_inside_it_and_says_unknown(capsys):
    started = time.monotonic()
    code, out = diag(capsys, "-r", "3", "--simulate=diag-faults", "--timeout", "12", "--sustained-seconds", "3600",
                     *SMALL)
    assert time.monotonic() - started < 12 * 2  # a 2x margin on the wall-clock bound
    assert code == 3 and out.startswith("NPU DIAG UNKNOWN - --timeout reached before npu0/chip0"), out


def test_huge_pages_all_taken_on_the_host_are_a_finding(tmp_path):
    from npumon.diag.deploy import hugepages_findings
    from npumon.model import Snapshot

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal: 100 kB\nHugePages_Total:    64\nHugePages_Free:      0\n")
    snapshot = Snapshot(time=0.0, host=None, chips=(), sources={})
    (finding,) = hugepages_findings(snapshot, str(tmp_path), 0.0)
    assert (finding.subject, finding.summary) == ("host", "all 64 huge pages of the host are in use")
    (tmp_path / "proc" / "meminfo").write_text("HugePages_Total:    64\nHugePages_Free:      3\n")
    assert hugepages_findings(snapshot, str(tmp_path), 0.0) == []


def test_without_npu_smi_or_simulation_it_is_one_unknown_line(capsys, tmp_path):
    config = tmp_path / "npumon.yaml"
    config.write_text("npu_smi: /nonexistent/npu-smi\n")
    code, out = diag(capsys, "-r", "1", "--config", str(config))
    assert code == 3 and out.startswith("NPU DIAG UNKNOWN - npu-smi not found") and out.count("\n") == 1


class _Terminal:
    def __init__(self):
        self.text = ""

    def isatty(self):
        return True

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_the_progress_line_names_the_running_items_and_is_wiped_at_the_end():
    from npumon.cli.diag import Progress

    terminal = _Terminal()
    progress = Progress(terminal, 2, time.time())
    progress.item("npu0/chip0", "h2d")
    progress.item("npu1/chip0", "matmul")
    assert "\rdiag -r 2: 2 chips running (h2d, matmul), 0 s" in terminal.text
    progress.done()
    assert terminal.text.endswith("\r" + " " * 120 + "\r")
    quiet = _Terminal()
    Progress(quiet, 1, time.time()).item("npu0/chip0", "h2d")  # level 1 has no long items
    assert quiet.text == ""


def test_each_figure_is_judged_against_its_own_pass_mark():
    from npumon.diag.expected import EXPECTED
    from npumon.model import PcieLink

    link = PcieLink(current_speed_gts=32.0, max_speed_gts=32.0, current_width=16, max_width=16)
    raw = pcie_bandwidth(32.0, 16)

    def rules(items):
        run = ChipRun("npu0/chip0", 0, EXPECTED["910B3"], link, {"items": items})
        return sorted(finding.rule for finding in judge([run], DEFAULT_THRESHOLDS, now=0.0))

    assert rules({"h2d": {"state": "ok", "bytes_per_second": 0.61 * raw},
                  "hbm_pattern": {"state": "ok", "bytes_per_second": 0.61 * 1600e9},
                  "matmul": {"state": "ok", "flops_per_second": 0.51 * 313e12}}) == []
    assert rules({"d2h": {"state": "ok", "bytes_per_second": 0.59 * raw},
                  "hbm_sustained": {"state": "ok", "bytes_per_second": 0.59 * 1600e9, "first_window": 1.0,
                                    "last_window": 0.9},
                  "matmul": {"state": "ok", "flops_per_second": 0.49 * 313e12},
                  "p2p": {"state": "unavailable", "message": "no peer"}}) == [
        "diag-hbm-bandwidth-low", "diag-item-unavailable", "diag-matmul-slow", "diag-pcie-bandwidth-low"]
    assert rules({"matmul_sustained": {"state": "ok", "flops_per_second": 300e12, "first_window": 300e12,
                                       "last_window": 0.84 * 300e12}}) == ["diag-throttling"]
    assert rules({"matmul": {"state": "failed", "message": "boom", "error_code": 507015}}) == ["diag-item-failed"]


def test_a_pyacl_without_a_call_an_item_needs_makes_it_unavailable_not_a_crash():
    from types import SimpleNamespace

    from npumon.diag.workloads import run_item

    session = SimpleNamespace(acl=SimpleNamespace(rt=SimpleNamespace()), operators=None)
    result = run_item("h2d", session, SimpleNamespace(copy_bytes=1024, item_seconds=1.0))
    assert result["state"] == "unavailable" and "AttributeError" in result["message"]


def test_the_pass_marks_are_rule_params_the_config_sets(tmp_path):
    from npumon.cli.check import load_rule_engine
    from npumon.settings import load_command_config

    config_file = tmp_path / "npumon.yaml"
    config_file.write_text("thresholds:\n  diag_copy_min_ratio: 0.05\n")
    _, params = load_rule_engine(load_command_config(str(config_file)), one_shot=True)
    assert {name: params["diag_" + name] for name in DEFAULT_THRESHOLDS} == dict(DEFAULT_THRESHOLDS,
                                                                              copy_min_ratio=0.05)
