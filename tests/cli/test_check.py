"""`npumon check`: a fake or simulated npu-smi, exit codes per the contract.

Most tests call the CLI's main() in-process (the `cli` fixture: the same exit code and output as the executable,
without an interpreter start per call). The `e2e` ones, the wall-clock ones and the closed-pipe one run
`python -m npumon.cli.main check` as a real process, and the `e2e` ones the simulator executable for every call,
as `npumon check --simulate` does outside the tests; elsewhere simulated npu-smi answers in-process
(tests/conftest.py)."""

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

import npumon.sim.scenario

from npumon.sim.hostroot import HostRootSpec, SimLink, write_host_root
from paths import FIXTURES

FIXTURES = Path(FIXTURES)


def capture_text(name):
    text = (FIXTURES / name).read_text()
    return text.split("# ---\n", 1)[1]


def run_npumon(*args, env=None, timeout=60):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)
    return proc, time.monotonic() - started


def fake_npu_smi(directory: Path, info_text: str) -> Path:
    """An `npu-smi` that prints one real capture for `info` and 'not supported' for every -t query."""
    (directory / "info.txt").write_text(info_text)
    script = directory / "npu-smi"
    script.write_text(textwrap.dedent("""\
        #!{python} -S
        import sys
        args = sys.argv[1:]
        if "-t" in args:
            print("This device does not support querying {{}}.".format(args[args.index("-t") + 1]))
        elif args == ["info"]:
            sys.stdout.write(open({info!r}).read())
        else:
            print("Command or option is not found.")
            sys.exit(1)
        """).format(python=sys.executable, info=str(directory / "info.txt")))
    script.chmod(0o755)
    return script


def healthy_root(tmp_path: Path, bus_ids) -> Path:
    root = tmp_path / "root"
    links = [SimLink(bus_id=b, current_speed="16.0 GT/s PCIe", max_speed="16.0 GT/s PCIe",
                     current_width=16, max_width=16) for b in bus_ids]
    write_host_root(str(root), HostRootSpec(device_count=8, links=links, numa_balancing=0,
                                            max_map_count=1048576))
    return root


@pytest.fixture
def fake_host(tmp_path):
    def make(capture, bus_ids=()):
        bindir = tmp_path / "bin"
        bindir.mkdir()
        fake_npu_smi(bindir, capture_text(capture))
        root = healthy_root(tmp_path, bus_ids)
        config = tmp_path / "npumon.yaml"
        config.write_text("root: {}\n".format(root))
        env = dict(os.environ, PATH="{}:{}".format(bindir, os.environ["PATH"]))
        return env, config
    return make


def test_only_main_table_works_every_chip_listed_and_unsupported_in_sources(fake_host, cli):
    bus_ids = ["0000:C1:00.0", "0000:C2:00.0", "0000:81:00.0", "0000:82:00.0",
               "0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0"]
    env, config = fake_host("info_910b3_8npu_v23.0.7.txt", bus_ids)
    proc = cli("check", "--json", "--full", "--config", str(config), env=env)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "npumon.check/v1"
    assert [(c["npu"], c["chip"]) for c in doc["chips"]] == [(n, 0) for n in range(8)]
    first = doc["chips"][0]
    assert first["name"] == "910B3" and first["health"] == "OK" and first["bus_id"] == "0000:C1:00.0"
    assert first["power_watts"] == 102.8 and first["temperature_celsius"] == 55
    assert first["hbm_used_bytes"] == 3338 * 1048576 and first["hbm_total_bytes"] == 65536 * 1048576
    assert first["aicore_ratio"] == 0.0
    assert first["aivector_ratio"] is None and first["ecc_double_bit_errors"] is None  # -t queries unsupported
    assert first["error_codes"] == []
    for query in ("usages", "power", "health", "ecc", "board"):
        source = doc["sources"]["npu-smi:" + query]
        assert source["unsupported"] is True, query
        assert "does not support querying " + query in source["error"]
    assert doc["sources"]["npu-smi"]["ok"] is True
    assert doc["status"] == "ok", doc["findings"]
    assert proc.returncode == 0


def test_alarm_capture_is_critical_with_nagios_line(fake_host, cli):
    env, config = fake_host("info_310b4_ALARM_v23.0.0_fixture.txt")
    proc = cli("check", "--config", str(config), env=env)
    assert proc.returncode == 2, proc.stdout
    first_line = proc.stdout.splitlines()[0]
    assert first_line.startswith("NPU CRITICAL - ")
    assert "health" in first_line.lower()
    assert "|" in first_line and "'npu0_chip0_temp'=" in first_line


def test_npu_smi_missing_is_unknown(tmp_path, cli):
    config = tmp_path / "npumon.yaml"
    config.write_text("npu_smi: /nonexistent/npu-smi\n")
    proc = cli("check", "--config", str(config))
    assert proc.returncode == 3
    assert proc.stdout.startswith("NPU UNKNOWN - npu-smi not found")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("text", [
    "poll:\n  table_seconds: fast\n",
    "pol:\n  table_seconds: 5\n",
    "poll: [1, 2\n",
])
def test_bad_config_is_one_line_unknown(tmp_path, text, cli):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    proc = cli("check", "--simulate", "--config", str(config))
    assert proc.returncode == 3
    assert proc.stdout.count("\n") == 1 and str(config) in proc.stdout
    assert "Traceback" not in proc.stderr
    proc = cli("check", "--json", "--config", str(config))
    assert proc.returncode == 3 and json.loads(proc.stdout)["status"] == "unknown"


# -- the simulated scenarios: each gives the exit code and findings it should ----------------------------

@pytest.mark.parametrize("scenario, code, rules", [
    pytest.param("healthy", 0, set(), marks=pytest.mark.e2e),
    ("overheat", 2, {"temperature-critical", "temperature-warning"}),
    ("ecc-rising", 2, {"ecc-uncorrectable"}),
    ("health-alarm", 2, {"health-alarm", "health-warning"}),
    ("cpu-bottleneck", 1, {"cpu-bottleneck"}),
    ("memory-bound", 0, {"memory-bound"}),  # an info finding: a hint, not a fault
    ("unsupported", 0, set()),
    ("host-misconfigured", 2, {"pcie-degraded", "numa-balancing-enabled", "max-map-count-low",
                               "device-files-missing", "versions-incompatible"}),
    ("probe-failure", 2, {"probe-failed"}),
    ("health-critical", 2, {"health-critical", "health-unknown"}),
    ("load-imbalance", 1, {"load-imbalance"}),
    ("board-incompatible", 2, {"board-incompatible"}),
    # the hung chip at 0 % among busy ones is also an imbalance (`for:` does not hold back one pass)
    ("hung-chip", 2, {"chip-hung", "load-imbalance"}),
    ("dstate-hang", 2, {"chip-dstate", "load-imbalance"}),
])
def test_scenario_exit_code_and_findings(request, cli, scenario, code, rules):
    # The probe, the board and usages (memory bandwidth) are not in the quick default pass: those need --full.
    # The processes' CPU time and state (chip-hung, chip-dstate) too.
    full = ["--full"] if scenario in ("probe-failure", "board-incompatible", "memory-bound", "hung-chip",
                                      "dstate-hang") else []
    args = ("check", "--json", "--simulate={}".format(scenario), *full)
    # the e2e case runs the executable, and it the simulator's, as a user does; the others main() in-process
    proc = run_npumon(*args)[0] if request.node.get_closest_marker("e2e") else cli(*args)
    doc = json.loads(proc.stdout)
    assert proc.returncode == code, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert doc["status"] == ["ok", "warning", "critical"][code]
    fired = {finding["rule"] for finding in doc["findings"]}
    assert fired == rules  # each scenario raises what it was made for, and nothing else
    assert all(finding["hint"] for finding in doc["findings"])


def test_unsupported_scenario_reports_every_query_in_sources(cli):
    proc = cli("check", "--json", "--simulate=unsupported", "--full")
    doc = json.loads(proc.stdout)
    assert doc["sources"]["npu-smi"]["ok"] is True
    unsupported = {name for name, source in doc["sources"].items() if source["unsupported"]}
    # identity asks `-t board -i N -c C`, refused like every -t query; its `info -m` still gives the ids
    assert unsupported == {"npu-smi:" + q for q in ("usages", "power", "health", "ecc", "board", "identity",
                                                    "hccs", "hccs_bw", "sio")}
    assert len(doc["chips"]) == 8 and all(chip["temperature_celsius"] is not None for chip in doc["chips"])
    assert [chip["device_id"] for chip in doc["chips"]] == list(range(8))


def test_healthy_scenario_on_every_product(cli):
    for product, chips in (("atlas-800i-a2", 8), ("atlas-a3", 16), ("atlas-300i-duo", 4), ("atlas-200i-a2", 1)):
        proc = cli("check", "--json", "--simulate", "--sim-product", product)
        doc = json.loads(proc.stdout)
        assert proc.returncode == 0, (product, doc["findings"])
        assert len(doc["chips"]) == chips, product


def _sim_children(under: Path):
    """Live simulated npu-smi processes of simulations kept under `under` (other tests may run their own)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "npumon.sim" not in cmdline:
            continue
        try:
            if proc.environ().get("NPUMON_SIM_STATE", "").startswith(str(under)) \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(cmdline)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


@pytest.mark.e2e
@pytest.mark.slow  # a wall-clock bound around a process start and exit: a loaded machine breaks it
def test_hang_returns_unknown_within_the_deadline_and_leaves_no_process(tmp_path):
    config = tmp_path / "npumon.yaml"
    config.write_text("npu_smi_timeout_seconds: 1\n")
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the simulation's state directory lands under tmp_path
    proc, elapsed = run_npumon("check", "--simulate=hang", "--config", str(config), env=env)
    assert proc.returncode == 3, proc.stdout
    assert elapsed < 1 + 4, elapsed  # the deadline, then a 2x margin on a start and an exit (about 1 s each)
    assert proc.stdout.startswith("NPU UNKNOWN - cannot read npu-smi: timed out after 1.0s")
    time.sleep(0.2)
    assert _sim_children(tmp_path) == []


def test_garbage_is_unknown_with_a_clear_message(cli):
    proc = cli("check", "--json", "--simulate=garbage")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 3
    assert doc["status"] == "unknown"
    assert doc["sources"]["npu-smi"]["ok"] is False
    assert doc["sources"]["npu-smi"]["error"].startswith("unreadable npu-smi info output: ")
    assert "Traceback" not in proc.stderr


def test_unknown_scenario_is_one_line_unknown(cli):
    proc = cli("check", "--simulate=no-such-scenario")
    assert proc.returncode == 3
    assert proc.stdout.startswith("NPU UNKNOWN - ") and proc.stdout.count("\n") == 1


# -- as an NRPE plugin: a quick default pass, a timeout, a status line within 1 KiB ---------------------------

def test_the_default_pass_reads_the_quick_tiers_and_full_reads_every_tier(cli):
    quick = cli("check", "--json", "--simulate")
    # kmsg: the simulated host's kernel log; chip-count: the expected-chip-count check
    assert set(json.loads(quick.stdout)["sources"]) == {"npu-smi", "npu-smi:health", "npu-smi:ecc", "host",
                                                        "serving-queue", "kmsg", "chip-count"}
    # every source the pass read says when: health with nothing to ask (all chips OK in the table) included
    assert all(status["last_success"] for status in json.loads(quick.stdout)["sources"].values())
    full = cli("check", "--json", "--simulate", "--full")
    assert set(json.loads(full.stdout)["sources"]) >= {"npu-smi:usages", "npu-smi:power", "npu-smi:board", "probe"}
    probed = cli("check", "--json", "--simulate", "--probe")
    assert "probe" in json.loads(probed.stdout)["sources"] and "npu-smi:board" not in json.loads(probed.stdout)["sources"]


@pytest.mark.slow  # NRPE's budget in wall time: a 2 s --timeout, bounded at 4 s around a process start
def test_npu_smi_calls_stop_before_the_timeout_so_a_hung_npu_smi_is_unknown_in_time(tmp_path):
    config = tmp_path / "npumon.yaml"
    config.write_text("npu_smi_timeout_seconds: 30\n")  # npu-smi's own deadline is far away: --timeout decides
    proc, elapsed = run_npumon("check", "--simulate=hang", "--timeout", "2", "--config", str(config))
    assert proc.returncode == 3 and elapsed < 2 + 2, elapsed
    assert proc.stdout.startswith("NPU UNKNOWN - cannot read npu-smi: timed out after 1.0s")
    bad, _ = run_npumon("check", "--simulate", "--timeout", "0")
    assert bad.returncode == 3 and "--timeout: must be a number of seconds above 0" in bad.stdout


@pytest.mark.slow  # NRPE's budget in wall time: waits out a 4 s --timeout, bounded at 7 s around a process start
def test_at_the_timeout_it_prints_what_it_has_and_names_what_it_still_waited_for(tmp_path):
    # The probe's child has a deadline of its own (30 s here), beyond the check's: the timeout ends the check.
    config = tmp_path / "npumon.yaml"
    config.write_text("probe: {timeout_seconds: 30, round_timeout_seconds: 40}\n")
    proc, elapsed = run_npumon("check", "--probe", "--simulate=probe-hang", "--timeout", "4", "--config", str(config))
    assert proc.returncode == 3 and elapsed < 4 + 3, elapsed
    first = proc.stdout.splitlines()[0]
    assert first.startswith("NPU UNKNOWN - check timed out after 4s; still waiting for probe | 'temp_max'=")
    assert "8 chips" in proc.stdout  # the table of what was read follows


@pytest.mark.slow  # hardware speed in wall time: every npu-smi call takes 1 s, the pass must end within 11 s
def test_healthy_at_one_second_per_npu_smi_call_is_ok_within_the_timeout(tmp_path):
    scenario = tmp_path / "healthy-slow.yaml"
    healthy = Path(npumon.sim.scenario.SCENARIO_DIR) / "healthy.yaml"
    scenario.write_text(healthy.read_text() + "\ndelay_seconds: 1\n")
    proc, elapsed = run_npumon("check", "--json", "--simulate={}".format(scenario))
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and elapsed < 9 + 2, (elapsed, doc["findings"], doc.get("error"))
    assert all(source["ok"] and not source["left_out"] for source in doc["sources"].values()), doc["sources"]
    # health's table column is OK everywhere, so the quick pass asks no chip for error codes
    assert doc["sources"]["npu-smi:health"]["error"] is None


@pytest.mark.slow  # NRPE's budget in wall time: 3 s calls against a 6 s --timeout, bounded at 8 s
def test_a_pass_that_could_not_make_every_call_in_time_is_unknown_not_ok(tmp_path):
    scenario = tmp_path / "healthy-slower.yaml"
    healthy = Path(npumon.sim.scenario.SCENARIO_DIR) / "healthy.yaml"
    scenario.write_text(healthy.read_text() + "\ndelay_seconds: 3\n")  # 8 ECC calls at 3 s through 2 slots
    proc, elapsed = run_npumon("check", "--json", "--simulate={}".format(scenario), "--timeout", "6")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 3 and elapsed < 6 + 2, elapsed
    assert doc["status"] == "unknown" and doc["error"].startswith(
        "check incomplete: --timeout reached before every call of npu-smi:ecc (")
    assert doc["sources"]["npu-smi:ecc"]["left_out"] > 0 and len(doc["chips"]) == 8  # what was read is shown


def test_the_status_line_of_a_16_chip_host_fits_nrpe_and_uses_nagios_units(cli):
    proc = cli("check", "--simulate", "--sim-product", "atlas-a3")
    line = proc.stdout.splitlines()[0]
    assert proc.returncode == 0 and len(line.encode()) <= 1024
    summary, perf = line.split(" | ")
    assert summary == "NPU OK - 16 chips OK"
    items = perf.split(" ")
    assert items[0].startswith("'temp_max'=") and items[1].startswith("'power_total'=")
    assert "'npu7_chip1_temp'=" in perf  # every chip's temperature fits; what does not fit is dropped whole
    for item in items:
        value = item.split("=", 1)[1].split(";")[0]
        assert re.fullmatch(r"-?[0-9.]+(%|B|s|c)?", value), item  # no W, no scientific notation


def test_a_reader_that_closes_the_pipe_early_does_not_change_the_verdict():
    # `npumon check --json | head -1`, as two processes joined by a pipe
    check = subprocess.Popen([sys.executable, "-m", "npumon.cli.main", "check", "--json", "--simulate=overheat"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-1"], stdin=check.stdout, capture_output=True, text=True, timeout=60)
    check.stdout.close()  # only head reads the pipe: when head exits, check's writes find it closed
    _, errors = check.communicate(timeout=60)
    assert check.returncode == 2 and head.stdout == "{\n" and b"Traceback" not in errors, errors


def test_quick_check_takes_chip_ids_from_the_file_a_full_pass_left(tmp_path, cli):
    """The quick pass never asks `info -m` or a per-chip `-t board` (too slow for NRPE on a real host): it reads
    the ids the daemon or a `--full` check wrote to <state_dir>/npu-smi-identity.json."""
    config = tmp_path / "npumon.yaml"
    config.write_text("state_dir: {}\n".format(tmp_path / "state"))
    quick = cli("check", "--json", "--simulate", "--config", str(config))
    assert [chip["device_id"] for chip in json.loads(quick.stdout)["chips"]] == [None] * 8  # no file yet
    full = cli("check", "--json", "--simulate", "--full", "--timeout", "30", "--config", str(config))
    full_chips = json.loads(full.stdout)["chips"]
    assert (tmp_path / "state" / "npu-smi-identity.json").exists()
    quick = cli("check", "--json", "--simulate", "--config", str(config))
    chips = json.loads(quick.stdout)["chips"]
    assert [chip["device_id"] for chip in chips] == list(range(8))
    assert [(chip["vdie_id"], chip["phy_id"]) for chip in chips] == [(chip["vdie_id"], None) for chip in full_chips]
    assert all(chip["vdie_id"] for chip in chips)
    assert "npu-smi:identity" not in json.loads(quick.stdout)["sources"]
