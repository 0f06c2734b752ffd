"""`npumon check` with the liveness probe, end to end in the simulator: real subprocesses all the way down
(npumon, the simulated npu-smi, the probe child with the simulated pyACL)."""

import json
import os
import re
import subprocess
import sys
import time

import psutil
import pytest

# Only the main table and the probe: the query tiers add nothing here and only cost time.
QUIET_CONFIG = "poll:\n" + "".join("  {}_seconds: 0\n".format(tier)
                                   for tier in ("usages", "power", "health", "ecc", "board"))


def npumon_check(tmp_path, *args, config="", env=None):
    path = tmp_path / "npumon.yaml"
    path.write_text(QUIET_CONFIG + config)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "check", "--probe", "--config", str(path), *args],
                          capture_output=True, text=True, timeout=120, env=env)
    return proc, time.monotonic() - started


@pytest.fixture(scope="module")
def failure_run(tmp_path_factory):
    """One check of the probe-failure scenario: (the process, the textfile it wrote)."""
    directory = tmp_path_factory.mktemp("failure")
    proc, _ = npumon_check(directory, "--json", "--simulate=probe-failure", "--textfile", str(directory))
    return proc, directory / "npumon.prom"


@pytest.fixture
def failure_json(failure_run):
    return failure_run[0]


def test_a_probe_failure_is_critical_and_named_per_chip(failure_json):
    assert failure_json.returncode == 2, failure_json.stdout[-3000:] + failure_json.stderr[-3000:]
    doc = json.loads(failure_json.stdout)
    assert doc["status"] == "critical"
    (finding,) = [f for f in doc["findings"] if f["rule"].startswith("probe")]
    assert (finding["rule"], finding["severity"], finding["subject"]) == ("probe-failed", "critical", "npu3/chip0")
    assert finding["summary"] == ("liveness probe failed in stage memcpy: acl.rt.memcpy (host to device) returned "
                                  "507053 (ACL_ERROR_RT_DEVICE_MEM_ERROR: uncorrectable error (UCE) in device memory)")
    assert "npu-smi info -t health -i 3 -c 0" in finding["hint"]


def test_json_has_the_probe_of_every_chip(failure_json):
    doc = json.loads(failure_json.stdout)
    assert doc["sources"]["probe"]["ok"] is True
    probes = {chip["npu"]: chip["probe"] for chip in doc["chips"]}
    assert len(probes) == 8
    for npu, probe in probes.items():
        # the 800I A2 table prints no logical ids: they come from npu-smi info -m
        assert probe["device_id"] == npu and probe["kind"] == "acl" and probe["first_run"] is True
        assert probe["state"] == ("failed" if npu == 3 else "ok"), probe
    ok = probes[0]
    assert list(ok["stage_seconds"]) == ["init", "set_device", "context", "device_status", "mem_info", "memcpy",
                                         "synchronize", "compute_prepare", "compute", "cleanup"]
    assert ok["detail"].startswith("compute: Add int32 [8,16] on the AI Core via ")
    assert ok["duration_seconds"] == pytest.approx(sum(ok["stage_seconds"].values()), abs=1e-5)
    failed = probes[3]
    assert (failed["failed_stage"], failed["error_code"], failed["error_name"]) == (
        "memcpy", 507053, "ACL_ERROR_RT_DEVICE_MEM_ERROR")


def test_the_table_shows_the_probe_column_and_nagios_says_critical(tmp_path):
    proc, _ = npumon_check(tmp_path, "--simulate=probe-failure")
    assert proc.returncode == 2
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("NPU CRITICAL - 1 finding: npu3/chip0 liveness probe failed in stage memcpy")
    header = next(line for line in lines if line.startswith("NPU  CHIP"))
    assert header.split()[-1] == "PROBE"
    rows = [line for line in lines if line[:1].isdigit()]
    assert len(rows) == 8
    assert rows[3].endswith("FAILED memcpy 507053")
    # every other chip: the probe's time and its compute step's
    assert all(row.split()[-4::2] == ["ok", "compute"] and row.endswith("ms") for i, row in enumerate(rows) if i != 3)


def test_no_probe_skips_it(tmp_path):
    proc, _ = npumon_check(tmp_path, "--json", "--no-probe", "--simulate=probe-failure")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, doc["findings"]
    assert "probe" not in doc["sources"]
    assert all(chip["probe"] is None for chip in doc["chips"])


def test_without_a_runtime_the_probe_is_unavailable_which_is_not_a_failure(tmp_path):
    proc, _ = npumon_check(tmp_path, "--json", "--simulate=no-acl-runtime")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, doc["findings"]
    source = doc["sources"]["probe"]
    assert (source["ok"], source["unsupported"]) == (False, True)
    assert source["error"].startswith("unavailable: pyACL (module acl) cannot be imported: libascendcl.so")
    assert {chip["probe"]["state"] for chip in doc["chips"]} == {"unavailable"}


def test_an_ai_core_that_hangs_while_copies_work_is_critical_with_the_ai_core_hint(tmp_path):
    proc, _ = npumon_check(tmp_path, "--json", "--simulate=aicore-hang")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 2, doc["findings"]
    (finding,) = doc["findings"]
    assert (finding["rule"], finding["subject"]) == ("probe-failed", "npu6/chip0")
    assert finding["summary"] == ("liveness probe failed in stage compute: acl.rt.synchronize_stream_with_timeout "
                                  "(after Add) returned 507014 (ACL_ERROR_RT_AICORE_TIMEOUT: AI Core execution timed "
                                  "out)")
    assert finding["hint"].startswith("The chip's AI Cores did not complete (or trapped on) a kernel")
    probes = {chip["npu"]: chip["probe"] for chip in doc["chips"]}
    assert "memcpy" in probes[6]["stage_seconds"]  # the copies passed
    assert all(probe["state"] == "ok" and "compute" in probe["stage_seconds"] for npu, probe in probes.items()
               if npu != 6)


def test_without_an_operator_library_compute_is_unavailable_and_the_check_ok(tmp_path):
    proc, _ = npumon_check(tmp_path, "--simulate=no-operator-library")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert proc.stdout.startswith("NPU OK")
    rows = [line for line in proc.stdout.splitlines() if line[:1].isdigit()]
    assert len(rows) == 8 and all(row.endswith(" no compute") and " ok " in row for row in rows)


def _processes_marked(marker):
    """Live processes whose environment carries `marker` (inherited from the npumon run that started them)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER) == marker and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


MARKER = "NPUMON_TEST_RUN"


@pytest.mark.slow
def test_a_hung_probe_is_killed_at_its_deadline_and_the_check_is_critical(tmp_path):
    marker = str(tmp_path)
    proc, elapsed = npumon_check(tmp_path, "--json", "--simulate=probe-hang",
                                 config="probe:\n  timeout_seconds: 2\n  round_timeout_seconds: 20\n"
                                        "  sync_timeout_ms: 1000\n", env=dict(os.environ, **{MARKER: marker}))
    assert proc.stdout, (proc.returncode, proc.stderr[-3000:])
    doc = json.loads(proc.stdout)
    assert proc.returncode == 2, doc["findings"]
    probe = next(chip["probe"] for chip in doc["chips"] if chip["npu"] == 5)
    assert (probe["state"], probe["failed_stage"]) == ("failed", "synchronize"), probe
    # its own 2 s, whether the child's watchdog or the kill at the deadline ended it
    assert re.match(r"no answer within 2(\.\d+)? s in stage synchronize", probe["detail"]), probe["detail"]
    assert elapsed < 30
    time.sleep(0.2)
    assert _processes_marked(marker) == []  # the hung child and the sleeper it started are gone


def test_the_textfile_carries_the_probe_metrics(failure_run):
    metrics = failure_run[1].read_text()
    assert metrics.count("\nnpumon_probe_success{") == 8
    assert 'npumon_probe_success{chip="0",npu="3"} 0.0' in metrics
    assert 'npumon_probe_failure_info{chip="0",code="507053",npu="3",stage="memcpy"} 1.0' in metrics
    assert 'npumon_probe_duration_seconds{chip="0",npu="7",stage="memcpy"}' in metrics


@pytest.mark.slow
def test_a3_chips_are_probed_by_their_chip_logic_id(tmp_path):
    proc, _ = npumon_check(tmp_path, "--json", "--simulate", "--sim-product", "atlas-a3")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, doc["findings"]
    assert [(c["npu"], c["chip"], c["probe"]["device_id"]) for c in doc["chips"]] == [
        (npu, chip, 2 * npu + chip) for npu in range(8) for chip in range(2)]


def test_a_bad_probe_setting_is_unknown_with_one_line(tmp_path):
    proc, _ = npumon_check(tmp_path, "--simulate", config="probe:\n  kind: tensorflow\n")
    assert proc.returncode == 3
    assert proc.stdout.count("\n") == 1
    assert proc.stdout.startswith("NPU UNKNOWN - ") and ":8: probe.kind: must be one of acl, torch" in proc.stdout
    assert "Traceback" not in proc.stderr
