"""The runtime-mismatch scenarios through the same path as real hardware (the simulated npu-smi, the probe
child with the simulated pyACL in a real subprocess, the sources, the rules, the exporter, `npumon check`):
each runtime-* rule fires on its scenario for its subject and nothing else does; `healthy` and an older
pyACL stay quiet; the families pass promtool."""

import json
import shutil
import subprocess
import sys

import pytest

from exposition_text import exposition, family_samples
from simulated_pass import judged_pass
from npumon.sim.scenario import ScenarioError, load_scenario

ALL_CHIPS = {"npu{}/chip0".format(npu) for npu in range(8)}
# scenario -> the runtime-* findings one full pass raises
ONE_PASS = {
    "healthy": set(),
    "older-pyacl": set(),
    "runtime-mismatch-devices": {("runtime-devices-missing", "host")},
    "runtime-mismatch-soc": {("runtime-soc-mismatch", subject) for subject in ALL_CHIPS},
    "runtime-mismatch-hbm": {("runtime-hbm-held", "npu3/chip0")},
    "runtime-mismatch-version": {("runtime-driver-mismatch", "host")},
    "runtime-mismatch": {("runtime-devices-missing", "host"), ("runtime-hbm-held", "npu3/chip0"),
                         ("runtime-driver-mismatch", "host")}
                        | {("runtime-soc-mismatch", subject) for subject in ALL_CHIPS},
}
# the probes the runtime cannot open (set_device beyond its device count)
REFUSED = {"runtime-mismatch-devices": {"npu6/chip0", "npu7/chip0"}, "runtime-mismatch": {"npu6/chip0", "npu7/chip0"}}
QUIET = "poll:\n" + "".join("  {}_seconds: 0\n".format(tier) for tier in ("usages", "power", "health", "ecc", "board"))


def full_pass(tmp_path, scenario):
    return judged_pass(tmp_path / scenario, scenario, QUIET + "probe: {skip_busy_above_ratio: null}\n")


@pytest.mark.integration
@pytest.mark.parametrize("scenario", sorted(ONE_PASS))
def test_each_runtime_rule_fires_on_its_scenario_and_only_there(tmp_path, scenario):
    snapshot, findings = full_pass(tmp_path, scenario)
    fired = {(finding.rule, finding.subject) for finding in findings if finding.rule.startswith("runtime-")}
    assert fired == ONE_PASS[scenario]
    others = {(finding.rule, finding.subject) for finding in findings if not finding.rule.startswith("runtime-")}
    assert others == {("probe-failed", subject) for subject in REFUSED.get(scenario, ())}
    assert all(finding.hint and "{" not in finding.hint and "n/a" not in finding.summary for finding in findings)
    runtimes = [chip.extra.get("runtime") for chip in snapshot.chips]
    assert all(runtime is not None for runtime in runtimes)
    statuses = {entry["status"] for runtime in runtimes for entry in runtime["values"].values()}
    assert statuses == ({"ok", "unsupported"} if scenario == "older-pyacl" else {"ok"})


@pytest.mark.integration
def test_check_shows_the_runtime_object_and_column_per_chip(tmp_path):
    config = tmp_path / "npumon.yaml"
    config.write_text(QUIET)
    command = [sys.executable, "-m", "npumon.cli.main", "check", "--probe", "--config", str(config)]
    proc = subprocess.run(command + ["--json", "--simulate=runtime-mismatch-hbm"], capture_output=True, text=True,
                          timeout=120)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1, doc["findings"]
    chip = doc["chips"][3]
    runtime = chip["runtime"]
    assert runtime["device_id"] == 3
    assert runtime["values"]["device_count"] == {"value": 8, "source": "acl.rt.get_device_count", "status": "ok"}
    assert runtime["values"]["hbm_free_bytes"]["source"] == "acl.rt.get_mem_info(ACL_HBM_MEM)"
    held = next(f for f in doc["findings"] if f["rule"] == "runtime-hbm-held")
    assert held["summary"] == "the runtime sees 38% less free device memory than npu-smi"
    assert "the runtime sees 1.6 GiB free of 64.0 GiB, npu-smi 25.6 GiB" in held["hint"]
    table = subprocess.run(command + ["--simulate=older-pyacl"], capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stdout
    lines = table.stdout.splitlines()
    header = next(line for line in lines if line.startswith("NPU  CHIP"))
    assert header.split()[-3:] == ["RUNTIME", "NET", "PROBE"]
    rows = [line for line in lines if line[:1].isdigit()]
    assert len(rows) == 8 and all("Ascend910B3 25.6G free" in row and "cube" not in row for row in rows)




@pytest.mark.integration
def test_runtime_families_by_engine_with_source_acl_and_promtool_is_content(tmp_path):
    snapshot, _ = full_pass(tmp_path, "runtime-mismatch")
    text = exposition(snapshot)
    utilization = family_samples(text, "npumon_chip_runtime_utilization_ratio")
    engines = {dict(labels)["engine"] for labels in utilization}
    assert engines == {"cube", "vector", "aicpu", "memory"}
    assert {dict(labels)["source"] for labels in utilization} == {"acl"}
    assert all(0 <= value <= 1 for value in utilization.values())
    free = {dict(labels)["npu"]: value
            for labels, value in family_samples(text, "npumon_chip_runtime_hbm_free_bytes").items()}
    assert free["3"] == (65536 - 39322 - 24576) * 1048576 and free["0"] == (65536 - 39322) * 1048576
    assert family_samples(text, "npumon_runtime_devices") == {(): 6}
    info = family_samples(text, "npumon_chip_runtime_info")
    assert {dict(labels)["soc_name"] for labels in info} == {"Ascend910A"}
    if shutil.which("promtool") is None:
        pytest.skip("promtool not on PATH (Debian: apt-get install prometheus)")
    result = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


@pytest.mark.parametrize("runtime, expected", [
    ("{pyacl: ancient}", ":2: acl_runtime.pyacl: must be one of newer, older"),
    ("{device_count: -1}", ":2: acl_runtime.device_count: expected a whole number >= 0"),
    ("{memory_held_mb: [3]}", ":2: acl_runtime.memory_held_mb: expected a mapping of logical device ids to MiB"),
    ("{memory_held_mb: {3: lots}}", ":2: acl_runtime.memory_held_mb.3: expected a whole number >= 0"),
    ("{soc: x}", ":2: acl_runtime.soc: unknown key"),
])
def test_bad_runtime_views_name_file_line_and_key(tmp_path, runtime, expected):
    path = tmp_path / "bad.yaml"
    path.write_text("product: atlas-800i-a2\nacl_runtime: {}\n".format(runtime))
    with pytest.raises(ScenarioError) as error:
        load_scenario(str(path))
    assert expected in str(error.value)
