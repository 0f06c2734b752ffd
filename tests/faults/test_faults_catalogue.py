"""The fault catalogue (npumon/faults): every code of the reference table with its level, the decoding of
node and sensor types, and the level and repair action that health findings carry."""

import collections
import csv
import glob
import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from npumon.faults import catalogue, levels
from npumon.model import ChipSample, HostSample, Snapshot, SourceStatus
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules
from paths import FIXTURES

REFERENCE = "/work/shared/reference/faults/fault_codes.csv"


def fixture_body(path):
    return Path(path).read_text().split("# ---\n", 1)[1]


def test_catalogue_holds_every_code_of_faultcode_json_once_with_the_higher_level():
    counts = collections.Counter(catalogue.lookup(code).level for code in catalogue.codes())
    # FAULTS.md §1.2: 804 entries, 802 distinct; A2301001 (RestartBusiness and SeparateNPU) keeps SeparateNPU,
    # B4060011 is listed twice under RestartBusiness.
    assert len(catalogue.codes()) == 802
    assert counts == {"NotHandleFault": 132, "RestartRequest": 33, "RestartBusiness": 24, "FreeRestartNPU": 23,
                      "RestartNPU": 162, "SeparateNPU": 215, "PreSeparateNPU": 200, "SubHealthFault": 13}
    assert catalogue.lookup("A2301001").level == "SeparateNPU"


@pytest.mark.skipif(not os.path.exists(REFERENCE), reason="the reference table is not on this machine")
def test_catalogue_matches_the_reference_table():
    with open(REFERENCE, encoding="utf-8", newline="") as handle:
        reference = list(csv.DictReader(handle))
    for row in reference:
        fault = catalogue.lookup(row["code"])
        assert levels.level_rank(fault.level) >= levels.level_rank(row["level"]), row["code"]
        assert fault.meaning and (not row["cause_en"] or fault.meaning == row["cause_en"]) or not row["cause_en"]


@pytest.mark.parametrize("code, node, node_name, sensor, sensor_name, state", [
    ("0x80FA4E00", 0x7D, "TSCPU", 0x27, "Heartbeat Sensor", 0),  # FAULTS.md §1.1 examples
    ("8C084E00", 0x604, "adda", 0x27, "Heartbeat Sensor", 0),
    ("8c03a000", 0x601, "process-manager", 0xD0, "General Software", 0),
])
def test_codes_decode_to_node_and_sensor_types(code, node, node_name, sensor, sensor_name, state):
    fault = catalogue.lookup(code)
    assert (fault.node_type, fault.node_type_name, fault.sensor_type, fault.sensor_type_name, fault.event_state) \
        == (node, node_name, sensor, sensor_name, state)


def test_codes_without_a_known_layout_are_not_decoded_and_unknown_codes_have_no_level():
    assert catalogue.lookup("A4025021").node_type is None  # top nibble 0xA: layout unknown
    unknown = catalogue.lookup("8DEAD000")
    assert unknown.level is None and unknown.repair_action is None and unknown.node_type is not None
    assert "node type" in unknown.meaning


def test_each_level_has_a_repair_action_and_the_families_add_their_advice():
    assert {level: levels.repair_action(level) for level in levels.levels()} == {
        "NotHandleFault": "none", "SubHealthFault": "none", "RestartRequest": "restart_workload",
        "RestartBusiness": "restart_workload", "FreeRestartNPU": "reset_npu", "RestartNPU": "reset_npu",
        "PreSeparateNPU": "inspect_hardware", "SeparateNPU": "replace_hardware",
        "ManuallySeparateNPU": "replace_hardware"}
    hbm = catalogue.lookup("80E01801")
    assert hbm.family == "memory" and "npu-smi info -t ecc" in hbm.context() and "restart" not in hbm.context()
    assert catalogue.lookup("80E01801").escalation == "freq>=2in86400s->ManuallySeparateNPU"


def health_fixture_codes():
    """Every code on an `Error Code : ...` line of the health captures (NA: none)."""
    codes = []
    for path in sorted(glob.glob(os.path.join(FIXTURES, "*health*"))):
        for match in re.finditer(r"(?m)^\s*Error Code\s*:\s*(.*)$", fixture_body(path)):
            codes.extend(code for code in match.group(1).split() if code != "NA")
    return codes


def test_every_error_code_of_the_health_fixtures_has_a_level_and_an_action():
    codes = health_fixture_codes()
    assert codes == ["A4025021", "8C03A000", "8C084E00"]
    for code in codes:
        fault = catalogue.lookup(code)
        assert fault.level and fault.repair_action in levels.REPAIR_ACTIONS and levels.level_action(fault.level), code


@pytest.mark.parametrize("health, rule", [("Warning", "health-warning"), ("Alarm", "health-alarm"),
                                          ("Critical", "health-critical")])
def test_health_findings_carry_the_most_severe_codes_level_and_repair_action(health, rule):
    rules, params = load_rules()
    chip = ChipSample(npu=0, chip=0, health=health, error_codes=health_fixture_codes())
    snapshot = Snapshot(time=100.0, host=HostSample(), chips=[chip], sources={"npu-smi": SourceStatus(ok=True)})
    finding, = [f for f in RuleEngine(rules, params, one_shot=True).evaluate(snapshot) if f.rule == rule]
    assert (finding.level, finding.repair_action) == ("RestartNPU", "reset_npu")
    assert "8C03A000 RestartNPU (PROCESS: ProcMgr heartbeat error)" in finding.hint
    assert "npu-smi set -t reset -i 0 -c 0" in finding.hint
    assert finding.to_json()["repair_action"] == "reset_npu"


def test_findings_without_a_known_code_have_a_null_repair_action_and_no_level():
    rules, params = load_rules()
    chip = ChipSample(npu=0, chip=0, health="Warning", error_codes=["8DEAD000"])
    snapshot = Snapshot(time=100.0, host=HostSample(), chips=[chip], sources={})
    finding, = RuleEngine(rules, params, one_shot=True).evaluate(snapshot)
    assert finding.repair_action is None and finding.to_json()["repair_action"] is None  # DESIGN.md: null
    assert "level" not in finding.to_json()


def fake_npu_smi(directory: Path) -> Path:
    """An npu-smi that prints a real 910A table and the real Alarm capture for `-t health` (the table's
    Health column says Alarm too, as it would next to that answer)."""
    table = fixture_body(os.path.join(FIXTURES, "info_910a_2cards_v21.0.2.txt"))
    (directory / "info.txt").write_text(table.replace("| OK            |", "| Alarm         |"))
    health = fixture_body(os.path.join(FIXTURES, "info-t-health_910a_ALARM_errcodes_tabs.txt"))
    (directory / "health.txt").write_text(health.split("\n", 1)[1])  # without the capture's command line
    script = directory / "npu-smi"
    script.write_text(textwrap.dedent("""\
        #!{python} -S
        import sys
        args = sys.argv[1:]
        if args[:1] == ["info"] and len(args) == 1:
            sys.stdout.write(open({info!r}).read())
        elif "-t" in args and args[args.index("-t") + 1] == "health":
            sys.stdout.write(open({health!r}).read())
        elif "-t" in args:
            print("This device does not support querying {{}}.".format(args[args.index("-t") + 1]))
        else:
            print("Command or option is not found.")
            sys.exit(1)
        """).format(python=sys.executable, info=str(directory / "info.txt"), health=str(directory / "health.txt")))
    script.chmod(0o755)
    return script


def test_check_json_gives_health_findings_of_a_real_capture_their_level_and_repair_action(tmp_path, cli):
    config = tmp_path / "npumon.yaml"
    config.write_text("npu_smi: {}\nroot: {}\nstate_dir: {}\n".format(fake_npu_smi(tmp_path), tmp_path / "root",
                                                                      tmp_path / "state"))
    proc = cli("check", "--json", "--no-probe", "--config", str(config))  # main() in-process
    findings = [f for f in json.loads(proc.stdout)["findings"] if f["rule"] == "health-alarm"]
    assert [(f["subject"], f["level"], f["repair_action"]) for f in findings] == [
        ("npu1/chip0", "RestartNPU", "reset_npu"), ("npu4/chip0", "RestartNPU", "reset_npu")]
