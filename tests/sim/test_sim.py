"""The simulated npu-smi: byte-for-byte layouts against real captures, scenarios read through its answers
(in-process; the executable as a subprocess where the process is the point: nominal values, a delay, a hang),
the scenario clock and state directory, scenario file errors, and (when the parsers are present) that
every product x scenario parses back to the values the scenario specifies."""

import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest

from npumon.sim.inprocess import run_in_process
from npumon.sim.npusmi import HANG_PIDS_FILE, main, respond, sim_host
from npumon.sim.products import (ATLAS_200I_A2, ATLAS_300I_DUO, ATLAS_800I_A2, ATLAS_A3, FAMILY_910, FAMILY_950,
                                  PRODUCTS, Product)
from npumon.sim.render_query import render_query
from npumon.sim.render_table import render_info, render_list, render_mapping
from npumon.sim.scenario import ScenarioError, load_scenario
from npumon.sim.simulation import list_scenarios, prepare_simulation, serving_queue_depth, set_scenario
from npumon.sim.state import SHARED_STATES, read_state, read_state_shared
from npumon.sim.values import HEALTH_STATES, ChipValues, chip_values_at, evaluate, host_with_defaults
from paths import FIXTURES

PROCESS_TIMEOUT = 20


def capture(name, skip=0):
    """A capture's output lines (after its `# ---` header), without the file's final newline."""
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    body = lines[lines.index("# ---") + 1:]
    if body[-1] == "":
        body.pop()
    return body[skip:]


def chip_values(**values):
    fields = {field.name: 0 for field in dataclasses.fields(ChipValues)}
    fields.update(health="OK", compatibility="OK", errors=[], power_watts=0.0, processes=[])
    fields.update(values)
    return ChipValues(**fields)


def lines_of(text, indent="\t"):
    """Output lines with npu-smi's TAB indent shown as `indent` (captures from blogs use 8 spaces)."""
    assert text.endswith("\n")
    return [line.replace("\t", indent, 1) if line.startswith("\t") else line for line in text[:-1].split("\n")]


def variant(product: Product, **changes) -> Product:
    return dataclasses.replace(product, **changes)


# -- main table, byte for byte ----------------------------------------------------------------------------


def test_a2_table_matches_the_8_npu_910b3_capture():
    product = variant(ATLAS_800I_A2, npu_smi_version="23.0.7")
    readings = [(102.8, 55, 3338), (97.6, 54, 3337), (96.5, 56, 3334), (108.7, 57, 3334),
                (103.9, 58, 3334), (99.3, 56, 3334), (107.7, 58, 3334), (105.1, 59, 3338)]
    chips = [(slot, chip_values(power_watts=power, temperature_celsius=temp, memory_used_mb=hbm))
             for slot, (power, temp, hbm) in zip(product.slots(), readings)]
    assert lines_of(render_info(product, chips, "23.0.7")) == capture("info_910b3_8npu_v23.0.7.txt", skip=1)


def test_a2_table_matches_the_25_5_1_fixture_with_a_vllm_process():
    product = variant(ATLAS_800I_A2, cards=(0, 5), bus_ids=("0000:C1:00.0", "0000:02:00.0"))
    slots = product.slots()
    chips = [(slots[0], chip_values(power_watts=102.8, temperature_celsius=45, memory_used_mb=3445)),
             (slots[1], chip_values(power_watts=100.8, temperature_celsius=44, memory_used_mb=60156,
                                    aicore_percent=12, processes=[(2290156, "VLLMEngineCore", 56630)]))]
    rendered = lines_of(render_info(product, chips, "25.5.1"))
    expected = capture("info_910b3_2npu_vllm-proc_v25.5.1_fixture.txt")
    # the fixture's author removed the "No running processes found in NPU 0" row and its rule
    head = expected.index("| NPU     Chip              | Process id    | Process name             "
                          "| Process memory(MB)      |") + 2
    assert rendered[:head] == expected[:head]
    assert rendered[head:] == [
        "| No running processes found in NPU 0                                                            |",
        expected[head - 1]] + expected[head:]


def test_a3_table_matches_the_910_93_capture():
    product = variant(ATLAS_A3, npu_smi_version="25.2.0", cards=(0, 1),
                      bus_ids=("0000:9C:00.0", "0000:9E:00.0", "0000:37:00.0", "0000:39:00.0"))
    readings = [(162.8, 37, 3133, []), (0.0, 37, 2876, []), (167.1, 38, 3116, []),
                (0.0, 38, 10568, [(990711, "python", 7746)])]
    chips = [(slot, chip_values(power_watts=power, temperature_celsius=temp, memory_used_mb=hbm, processes=procs))
             for slot, (power, temp, hbm, procs) in zip(product.slots(), readings)]
    assert lines_of(render_info(product, chips, "25.2.0")) == capture("info_a3_910-93_4chips_proc_v25.2.0_fixture.txt")


def test_300i_duo_table_matches_the_310p3_capture():
    product = variant(ATLAS_300I_DUO, npu_smi_version="25.2.0", cards=(2,), bus_ids=("0000:01:00.0",) * 2)
    slots = product.slots()
    chips = [(slots[0], chip_values(temperature_celsius=45, memory_used_mb=1529)),
             (slots[1], chip_values(temperature_celsius=43, memory_used_mb=1412))]
    rendered = lines_of(render_info(product, chips, "25.2.0"))
    expected = capture("info_310p3-duo_1card2chips_v25.2.0_partial.txt")
    complete, cut = expected[:-1], expected[-1]  # the capture stops inside the process table's first rule
    assert rendered[:len(complete)] == complete
    assert rendered[len(complete)].startswith(cut)


def test_310p_single_chip_card_matches_the_capture_with_an_empty_process_table():
    product = variant(ATLAS_300I_DUO, npu_smi_version="23.0.0", cards=(24,), chips_per_card=1,
                      memory_total_mb=(21527,), bus_ids=("0000:04:00.0",))
    chips = [(product.slots()[0], chip_values(temperature_celsius=29, memory_used_mb=1832))]
    expected = capture("info_310p3_npu24_v23.0.0_with_proc_header.txt", skip=1)
    assert lines_of(render_info(product, chips, "23.0.0")) == expected


def test_310b_board_matches_the_alarm_capture_without_a_process_table():
    product = variant(ATLAS_200I_A2, npu_smi_version="23.0.0")
    chips = [(product.slots()[0], chip_values(health="Alarm", power_watts=0.0, temperature_celsius=65,
                                              hugepages_used=15, hugepages_total=15, memory_used_mb=3628))]
    rendered = lines_of(render_info(product, chips, "23.0.0"))
    # every line of this capture carries one trailing space from the terminal copy
    assert [line + " " for line in rendered] == capture("info_310b4_ALARM_v23.0.0_fixture.txt")


# -- key/value outputs, byte for byte ---------------------------------------------------------------------


def a2_card(**values):
    slot = ATLAS_800I_A2.slots()[0]
    return [(slot, chip_values(**values))]


def query(product, name, card_chips, chip=None, firmware="7.8.0.6.201"):
    return render_query(product, name, card_chips[0][0].npu, chip, card_chips, "25.5.1", firmware)


def test_usages_matches_the_910b_fixture():
    text = query(ATLAS_800I_A2, "usages", a2_card(memory_used_mb=3400, ctrlcpu_percent=6))
    # the card-level form ends each chip block with a blank line; the fixture was trimmed after the last key
    assert lines_of(text, " " * 8) == capture("info-t-usages_910b_v25.5.1_fixture.txt") + [""]


def test_power_temp_and_board_match_the_910b_fixtures():
    power = query(ATLAS_800I_A2, "power", a2_card(power_watts=103.5))
    assert lines_of(power, " " * 8) == capture("info-t-power_910b_v25.5.1_fixture.txt") + [""]
    temp = query(ATLAS_800I_A2, "temp", a2_card(temperature_celsius=39, board_temperature_celsius=36))
    assert lines_of(temp, " " * 8) == capture("info-t-temp_910b_mcu_v25.5.1_fixture.txt") + [""]
    board = query(ATLAS_800I_A2, "board", a2_card())
    assert lines_of(board, " " * 8) == capture("info-t-board_910b_card_v25.5.1_fixture.txt")


def test_chip_level_memory_matches_the_capture():
    text = query(ATLAS_800I_A2, "memory", a2_card(hbm_temperature_celsius=46), chip=0)
    assert lines_of(text, " " * 8) == capture("info-t-memory_910b_issue78.txt", skip=1)


def test_chip_level_health_alarm_matches_the_capture_with_three_error_codes():
    errors = [(0xA4025021, "ascend_monitor adda heart beat lost error"),
              (0x8C03A000, "node type=process-manager, sensor type=General Software, "
                           "event state=The process start failed or exit abnormally"),
              (0x8C084E00, "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.")]
    text = query(ATLAS_800I_A2, "health", a2_card(health="Alarm", errors=errors), chip=0)
    assert lines_of(text) == capture("info-t-health_910a_ALARM_errcodes_tabs.txt", skip=1)
    healthy = query(ATLAS_800I_A2, "health", a2_card(), chip=0)
    assert lines_of(healthy) == capture("info-t-health_910a_OK_v23.0.5_tabs.txt", skip=1)


def test_unhealthy_chip_without_error_codes_reads_ok_in_chip_level_health_as_npu_smi_does():
    text = query(ATLAS_800I_A2, "health", a2_card(health="Warning"), chip=0)
    assert "Health Status                  : OK" in text
    card_level = query(ATLAS_800I_A2, "health", a2_card(health="Warning"))
    assert "\tHealth                         : Warning\n" in card_level


def test_310p_usages_and_common_match_the_docstring_captures():
    product = variant(ATLAS_300I_DUO, cards=(1,), chips_per_card=1, memory_total_mb=(21534,),
                      bus_ids=("0000:81:00.0",))
    card = [(product.slots()[0], chip_values(memory_used_mb=1000, ctrlcpu_percent=13, ddr_bandwidth_percent=51,
                                             aicore_freq_mhz=960, temperature_celsius=43,
                                             board_temperature_celsius=41, power_watts=13.4))]
    usages = query(product, "usages", card)
    assert lines_of(usages, "") == capture("info-t-usages_310p_gpustack-docstring.txt") + [""]
    common = query(product, "common", card)
    assert lines_of(common, "") == capture("info-t-common_310p_mcu-power_gpustack-docstring.txt")


def test_list_and_mapping_match_the_captures():
    assert lines_of(render_list(ATLAS_800I_A2), " " * 8) == capture("info-l_910b_8npu_v25.5.1_fixture.txt") + [""]
    two_cards = variant(ATLAS_800I_A2, cards=(0, 1))
    assert lines_of(render_mapping(two_cards)) == capture("info-m_910b3_tabs_v25.5.1_fixture.txt")


def test_error_texts_match_the_captures():
    sim = sim_host(_state("healthy", "atlas-800i-a2"), 0.0)
    text, status = respond(["info", "-i", "9", "-t", "board"], sim)
    assert (lines_of(text), status) == (capture("error_invalid-card-id_910a.txt", skip=1), 215)
    text, status = respond(["info", "-t", "template-info", "-i", "0"], sim)
    assert (lines_of(text), status) == (capture("error_not-support-querying_template-info_310b.txt"), 0)
    assert respond(["info", "-t", "usages", "-i", "0", "-c", "7"], sim)[0].startswith("Invalid chip id.\n")
    assert respond(["info", "-t", "bogus", "-i", "0"], sim) == ("Error parameter of -t\n", 215)
    assert respond(["info", "watch"], sim) == ("Command or option is not found.\n", 215)
    assert respond(["-v"], sim) == ("npu-smi version: 25.5.1\n", 0)


def test_the_executable_without_a_simulation_says_so_on_stderr(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("NPUMON_SIM_STATE", raising=False)
    assert main(["info"]) == 2
    assert "NPUMON_SIM_STATE is not set" in capsys.readouterr().err
    monkeypatch.setenv("NPUMON_SIM_STATE", str(tmp_path))
    assert main(["info"]) == 2
    assert "cannot read simulation state" in capsys.readouterr().err


def test_products_answer_only_the_queries_they_support():
    duo = sim_host(_state("healthy", "atlas-300i-duo"), 0.0)
    assert respond(["info", "-t", "power", "-i", "2"], duo) == ("This device does not support querying power.\n", 0)
    assert respond(["info", "-t", "usages", "-i", "1"], duo)[0].startswith("Invalid card id.")
    usages = respond(["info", "-t", "usages", "-i", "5"], duo)[0]
    assert "Vectorcore Usage Rate(%)" in usages and "DVPP JPEGD Usage Rate(%)" in usages
    assert "DDR Single Bit Next-Isolated Pages Count" in respond(["info", "-t", "ecc", "-i", "5"], duo)[0]
    board = sim_host(_state("healthy", "atlas-200i-a2"), 0.0)
    assert "Memory Bandwidth Usage Rate(%)" in respond(["info", "-t", "usages", "-i", "0"], board)[0]
    assert "| NA              |" in respond(["info"], board)[0]
    a3 = sim_host(_state("healthy", "atlas-a3"), 0.0)
    power = respond(["info", "-t", "power", "-i", "3"], a3)[0]
    assert power.count("NPU Real-time Power(W)") == 1  # die 1 has no power of its own
    assert len(respond(["info", "-m"], a3)[0].splitlines()) == 1 + 8 * 3


# -- the value language and scenario files ----------------------------------------------------------------


def test_values_ramp_with_a_cap_steps_and_a_deterministic_wobble():
    ramp = {"start": 87, "per_minute": 1.5, "max": 95}
    assert [evaluate(ramp, t) for t in (0, 60, 600)] == [87.0, 88.5, 95.0]
    steps = {"steps": [[0, "OK"], [300, "Alarm"]]}
    assert [evaluate(steps, t) for t in (0, 299.9, 300)] == ["OK", "OK", "Alarm"]
    wobble = {"start": 50, "wobble": 4, "period_seconds": 120}
    assert evaluate(wobble, 30) == pytest.approx(54.0)
    assert evaluate(wobble, 17.5, phase=0.7) == evaluate(wobble, 17.5, phase=0.7)


def test_the_package_exports_the_simulation_api_without_loading_yaml_for_the_executable():
    import npumon.sim

    assert npumon.sim.prepare_simulation is prepare_simulation and npumon.sim.list_products() == sorted(PRODUCTS)
    probe = "import sys, npumon.sim.npusmi; print('yaml' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout == "False\n"


def test_every_built_in_scenario_loads_and_overrides_reach_only_their_devices():
    names = list_scenarios()
    assert {"healthy", "overheat", "ecc-rising", "health-alarm", "cpu-bottleneck", "memory-bound", "slow",
            "hang", "garbage", "unsupported"} <= set(names)
    for name in names:
        assert load_scenario(name)["product"] in PRODUCTS
    overheat = load_scenario("overheat")["chips"]
    assert chip_values_at(overheat, 0, 0.0, 65536, 1800).temperature_celsius >= 85
    assert 80 <= chip_values_at(overheat, 1, 0.0, 65536, 1800).temperature_celsius <= 84
    assert chip_values_at(overheat, 2, 0.0, 65536, 1800).temperature_celsius < 60
    slow = load_scenario("slow")  # three times real npu-smi's time per call, no fixed delay on top
    assert (slow["latency_scale"], slow["delay_seconds"]) == (3, 0)


@pytest.mark.parametrize("text, expected", [
    ("product: atlas-800i-a2\nchips:\n  default:\n    temprature_celsius: 40\n",
     ":4: chips.default.temprature_celsius: unknown key"),
    ("product: atlas-800i-a2\nchips:\n  default: [1\n", ":4: not valid YAML"),
    ("product: atlas-800i-a2\nchips:\n  overrides:\n    - devices: [0]\n      errors:\n"
     "        - {code: 12345678, information: x}\n", ":6: chips.overrides[0].errors[0].code: expected a quoted hex"),
    ("product: atlas-900\n", ":1: product: unknown product 'atlas-900'"),
    ("product: atlas-800i-a2\nchips:\n  default:\n    health: {steps: {0: OK, 60: Broken}}\n",
     ":4: chips.default.health.steps: must be one of OK"),
    ("product: atlas-800i-a2\nchips:\n  overrides:\n    - devices: [2]\n      compatibility: BAD\n",
     ":5: chips.overrides[0].compatibility: must be one of OK, NOK, UNKNOWN, NOT SUPPORT"),
    ("product: atlas-800i-a2\nhost:\n  inaccessible_device_files: [dev/davinci3]\n",
     ":3: host.inaccessible_device_files: expected an absolute path"),
    ("product: atlas-800i-a2\nhost:\n  missing_device_files: [/dev/hisi_hdc]\n"
     "  inaccessible_device_files: [/dev/davinci0, /dev/hisi_hdc]\n",
     ":4: host.inaccessible_device_files: /dev/hisi_hdc is also in missing_device_files"),
    ("product: atlas-800i-a2\nhost:\n  numa_nodes: 3\n  cpu_busy_ratio: [0.1, 0.2]\n",
     ":4: host.cpu_busy_ratio: give one ratio for all NUMA nodes or one per node"),
    ("product: atlas-800i-a2\ndelay_seconds: -1\n", ":2: delay_seconds: must be within"),
    ("chips: {}\n", "product: missing"),
    ("product: atlas-a3\nchips:\n  default:\n    processes:\n      - {name: x, memory_mb: 1, memory_percent: 5}\n",
     ":5: chips.default.processes[0]: give the process memory as either memory_mb or memory_percent"),
])
def test_scenario_errors_name_file_line_and_key(tmp_path, text, expected):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as error:
        load_scenario(str(path))
    message = str(error.value)
    assert message.startswith(str(path)) and expected in message and "\n" not in message


def test_unknown_scenario_and_bad_arguments_are_rejected(tmp_path):
    with pytest.raises(ScenarioError, match="unknown scenario 'nope'; built-in scenarios: .*cpu-bottleneck"):
        prepare_simulation(str(tmp_path), "nope")
    with pytest.raises(ScenarioError, match="unknown product 'atlas-9000'; known: atlas-200i-a2"):
        prepare_simulation(str(tmp_path), "healthy", product="atlas-9000")
    with pytest.raises(ValueError, match="time_scale"):
        prepare_simulation(str(tmp_path), "healthy", time_scale=-1)


# -- the scenarios through the simulator's answers ---------------------------------------------------------


def run(sim, *args):
    """The executable as a subprocess."""
    return subprocess.run(sim.npu_smi_argv + list(args), env=dict(os.environ, **sim.env), capture_output=True,
                          text=True, timeout=PROCESS_TIMEOUT)


def answer(sim, *args):
    """The same answer in this process (sim/inprocess.py; tests/sim/test_sim_inprocess.py holds it to the
    executable's output, exit status and waits): no interpreter start per call."""
    return run_in_process(sim.npu_smi_argv + list(args), sim.env, PROCESS_TIMEOUT)


def table_rows(text):
    """(npu, health, power, temperature) from each chip's first row of a main table."""
    rows = []
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) == 5 and len(cells[1].split()) == 2 and cells[2].strip() in HEALTH_STATES:
            power, temperature = cells[3].split()[:2]
            rows.append((int(cells[1].split()[0]), cells[2].strip(), power, int(temperature)))
    return rows


def test_healthy_scenario_runs_as_a_subprocess_with_nominal_values(tmp_path):
    sim = prepare_simulation(str(tmp_path), "healthy", time_scale=0)
    result = run(sim, "info")
    assert result.returncode == 0 and result.stderr == ""
    rows = table_rows(result.stdout)
    assert [row[0] for row in rows] == list(range(8))
    assert all(health == "OK" and 40 <= temperature <= 60 for _, health, _, temperature in rows)
    assert result.stdout.count("VLLMEngineCore") == 8


def test_overheat_shows_a_hot_chip_and_one_in_the_warning_band(tmp_path):
    sim = prepare_simulation(str(tmp_path), "overheat", time_scale=0)
    temperatures = {npu: temperature for npu, _, _, temperature in table_rows(answer(sim, "info").stdout)}
    assert temperatures[0] >= 85 and 80 <= temperatures[1] <= 84
    state = read_state(sim.env["NPUMON_SIM_STATE"])
    assert [sim_host(state, t).chips[0][1].temperature_celsius for t in (0.0, 120.0, 3600.0)] == [87, 90, 105]


def test_ecc_rising_counts_single_bit_errors_and_an_isolated_double_bit_page(tmp_path):
    sim = prepare_simulation(str(tmp_path), "ecc-rising", time_scale=60)
    text = answer(sim, "info", "-t", "ecc", "-i", "2").stdout
    counts = {line.split(":")[0].strip(): int(line.split(":")[1]) for line in text.splitlines() if ":" in line}
    assert counts["HBM Single Bit Error Count"] >= 120
    assert counts["HBM Double Bit Error Count"] == 1 and counts["HBM Double Bit Isolated Pages Count"] == 1
    state = read_state(sim.env["NPUMON_SIM_STATE"])
    assert [sim_host(state, t).chips[2][1].ecc_single_bit_errors for t in (0.0, 600.0)] == [120, 420]


def test_health_alarm_prints_alarm_with_the_real_error_codes(tmp_path):
    sim = prepare_simulation(str(tmp_path), "health-alarm", time_scale=0)
    text = answer(sim, "info", "-t", "health", "-i", "0", "-c", "0").stdout
    assert "\tHealth Status                  : Alarm\n" in text
    assert "\tError Code                     : A4025021 8C03A000 8C084E00\n" in text
    health = {npu: health for npu, health, _, _ in table_rows(answer(sim, "info").stdout)}
    assert (health[0], health[1], health[2]) == ("Alarm", "Warning", "OK")


def test_cpu_bottleneck_starves_the_npus_while_one_numa_node_saturates(tmp_path):
    sim = prepare_simulation(str(tmp_path), "cpu-bottleneck")
    before = _cpu_jiffies(sim.root)
    time.sleep(0.3)
    text = answer(sim, "info", "-t", "usages", "-i", "0").stdout
    after = _cpu_jiffies(sim.root)
    assert int(text.split("Aicore Usage Rate(%)           : ")[1].split()[0]) < 30
    # each call moves the fake /proc/stat on; NUMA node 0 (CPUs 0-3) is near saturation, node 1 is not
    assert _busy_share(before, after, range(0, 4)) > 0.9
    assert _busy_share(before, after, range(4, 8)) < 0.4
    assert serving_queue_depth(sim.env["NPUMON_SIM_STATE"]) > 100
    state = read_state(sim.env["NPUMON_SIM_STATE"])
    assert all(values.aicore_percent < 30 and values.processes for _, values in sim_host(state, 600.0).chips)


def test_memory_bound_runs_hbm_bandwidth_above_90_percent(tmp_path):
    sim = prepare_simulation(str(tmp_path), "memory-bound", time_scale=0)
    text = answer(sim, "info", "-t", "usages", "-i", "0").stdout
    assert int(text.split("HBM Bandwidth Usage Rate(%)    : ")[1].split()[0]) > 90


def _compatibility_lines(board_text):
    """The values of every `Compatibility` line of a `-t board` output."""
    return [line.split(":", 1)[1].strip() for line in board_text.splitlines()
            if line.strip().startswith("Compatibility ")]


def test_board_incompatible_prints_nok_for_the_card_of_device_2_only(tmp_path):
    sim = prepare_simulation(str(tmp_path), "board-incompatible", time_scale=0)
    printed = {npu: _compatibility_lines(answer(sim, "info", "-t", "board", "-i", str(npu)).stdout)
               for npu in range(8)}
    assert printed == {npu: ["NOK" if npu == 2 else "OK"] for npu in range(8)}
    # device 2 opens a card on the multi-chip products too; the SoC board prints no Compatibility at all
    for product_name, nok_card in (("atlas-a3", 1), ("atlas-300i-duo", 5), ("atlas-200i-a2", None)):
        host = sim_host(_state("board-incompatible", product_name), 0.0)
        printed = {npu: _compatibility_lines(respond(["info", "-t", "board", "-i", str(npu)], host)[0])
                   for npu in host.product.cards}
        expected_line = [] if nok_card is None else ["OK"]
        assert printed == {npu: ["NOK"] if npu == nok_card else expected_line for npu in host.product.cards}


def test_slow_answers_after_its_delay_and_user_scenario_files_work(tmp_path):
    path = tmp_path / "my-slow.yaml"
    path.write_text("product: atlas-a3\ndelay_seconds: 0.6\n")
    sim = prepare_simulation(str(tmp_path / "state"), str(path))
    assert (sim.scenario, sim.product) == ("my-slow", "atlas-a3")
    started = time.monotonic()
    result = run(sim, "info")
    assert time.monotonic() - started >= 0.6
    assert len(table_rows(result.stdout)) == 16


def test_unsupported_refuses_every_query_but_prints_the_table(tmp_path):
    sim = prepare_simulation(str(tmp_path), "unsupported", time_scale=0)
    result = answer(sim, "info", "-t", "usages", "-i", "0")
    assert (result.stdout, result.returncode) == ("This device does not support querying usages.\n", 0)
    assert len(table_rows(respond(["info"], sim_host(read_state(sim.env["NPUMON_SIM_STATE"]), 0.0))[0])) == 8


def test_garbage_cuts_the_table_mid_row_and_corrupts_cells(tmp_path):
    sim = prepare_simulation(str(tmp_path), "garbage", time_scale=0)
    table = answer(sim, "info").stdout
    assert "#?%!" in table and not table.endswith("\n") and not table.endswith("|")
    assert table == answer(sim, "info").stdout  # deterministic
    usages = answer(sim, "info", "-t", "usages", "-i", "0").stdout
    assert "Chip ID" not in usages and not usages.endswith("\n")


def test_hang_never_answers_and_leaves_an_orphan_unless_the_group_is_killed(tmp_path):
    sim = prepare_simulation(str(tmp_path), "hang")
    process = subprocess.Popen(sim.npu_smi_argv + ["info"], env=dict(os.environ, **sim.env),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=1.0)
        parent, child = _hang_pids(tmp_path)
        assert parent == process.pid
        os.kill(process.pid, signal.SIGKILL)  # killing only the direct child ...
        process.wait(timeout=5)
        assert _alive(child)  # ... leaves its sleeping child behind
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=5)
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_time_moves_with_the_time_scale_and_the_state_directory_keeps_calls_consistent(tmp_path):
    frozen = prepare_simulation(str(tmp_path / "frozen"), "overheat", time_scale=0)
    assert answer(frozen, "info").stdout == answer(frozen, "info").stdout
    running = prepare_simulation(str(tmp_path / "running"), "overheat", time_scale=120)  # 3 C per second
    first = table_rows(answer(running, "info").stdout)[0][3]
    time.sleep(0.7)
    second = table_rows(answer(running, "info").stdout)[0][3]
    assert second > first


def test_the_host_root_reflects_product_and_scenario(tmp_path):
    sim = prepare_simulation(str(tmp_path), "healthy", product="atlas-300i-duo")
    devices = sorted(os.listdir(os.path.join(sim.root, "dev")))
    assert [name for name in devices if name.startswith("davinci") and name[7:].isdigit()] == \
        ["davinci0", "davinci1", "davinci2", "davinci3"]
    links = sorted(os.listdir(os.path.join(sim.root, "sys", "bus", "pci", "devices")))
    assert links == ["0000:01:00.0", "0000:82:00.0"]  # the two chips of a Duo card share one link
    board = prepare_simulation(str(tmp_path / "board"), "healthy", product="atlas-200i-a2")
    assert "devmm_svm" not in os.listdir(os.path.join(board.root, "dev"))


# -- every product x scenario parses back to the scenario's values -----------------------------------------


# card-drop's missing card answers no query at all: tests/sim/test_sim_kmsg.py checks it
PARSED_SCENARIOS = [name for name in list_scenarios() if name not in ("hang", "slow", "garbage", "card-drop")]


@pytest.mark.parametrize("product_name", sorted(PRODUCTS))
@pytest.mark.parametrize("scenario_name", PARSED_SCENARIOS)
def test_outputs_parse_back_to_the_scenario_values(product_name, scenario_name):
    table_parser = pytest.importorskip("npumon.sources.npusmi.table")
    kv = pytest.importorskip("npumon.sources.npusmi.kv")
    state = _state(scenario_name, product_name)
    sim = sim_host(state, 0.0)
    product = sim.product
    table = table_parser.parse_info(respond(["info"], sim)[0])
    assert [(chip.npu, chip.chip) for chip in table.chips] == [(slot.npu, slot.chip) for slot, _ in sim.chips]
    for parsed, (slot, values) in zip(table.chips, sim.chips):
        assert parsed.health == values.health
        assert parsed.temperature_celsius == values.temperature_celsius
        # the 950's table prints NPU Util(%) where the others print AICore(%)
        assert parsed.aicore_percent == (values.npu_utilization_percent if product.family == FAMILY_950
                                         else values.aicore_percent)
        assert parsed.bus_id == slot.bus_id
        expected_power = None if product.name == "atlas-300i-duo" or (product.name == "atlas-a3" and slot.chip == 1) \
            else round(values.power_watts, 1)
        assert parsed.power_watts == expected_power
        used = parsed.hbm_used_mb if product.has_hbm else parsed.memory_used_mb
        assert used == values.memory_used_mb
        if product.family == FAMILY_910:  # the 910 A1's DDR next to its HBM
            assert (parsed.memory_used_mb, parsed.memory_total_mb) == (values.ddr_used_mb, slot.ddr_total_mb)
    if product.has_process_table:
        assert [(p.npu, p.chip, p.pid, p.memory_mb) for p in table.processes] == [
            (slot.npu, None if product.family == FAMILY_950 else slot.chip, pid, memory)  # 950: no Chip column
            for slot, values in sim.chips for pid, _, memory in values.processes]
    for slot, values in sim.chips:
        for name in ("usages", "ecc", "health"):
            # the 950 takes no -c: its card-level answers are its chip's
            chip_option = ["-c", str(slot.chip)] if product.has_chip_option else []
            text = respond(["info", "-t", name, "-i", str(slot.npu)] + chip_option, sim)[0]
            if state["scenario"]["behaviour"] == "unsupported":
                assert kv.classify_error(text).kind == "unsupported"
                continue
            parsed = getattr(kv, "parse_" + name)(text, chip=slot.chip)[slot.chip]
            if name == "usages":
                assert parsed["aicore_ratio"] == pytest.approx(values.aicore_percent / 100)
                if product.has_hbm:
                    assert parsed["hbm_bandwidth_ratio"] == pytest.approx(values.hbm_bandwidth_percent / 100)
            elif name == "ecc":
                assert parsed["ecc_single_bit_errors"] == values.ecc_single_bit_errors
                assert parsed["ecc_double_bit_errors"] == values.ecc_double_bit_errors
                isolated = values.ecc_single_bit_isolated_pages + values.ecc_double_bit_isolated_pages
                # 310B boards print no isolated-page counters at all
                assert parsed["ecc_isolated_pages"] == (None if product.name == "atlas-200i-a2" else isolated)
            else:
                # npu-smi prints OK for Warning/Alarm/Critical without an error code (FORMATS.md 4.8); the 950's
                # card-level answer prints the health as it is
                assert parsed["health"] == (values.health if values.errors or values.health in ("OK", "UNKNOWN")
                                            or product.family == FAMILY_950 else "OK")
                assert parsed.get("error_codes", []) == ["%08X" % code for code, _ in values.errors]
                assert parsed.get("error_information", []) == [text for _, text in values.errors]
    for npu in product.cards:
        card = [(slot, values) for slot, values in sim.chips if slot.npu == npu]
        power_text = respond(["info", "-t", "power", "-i", str(npu)], sim)[0]
        board_text = respond(["info", "-t", "board", "-i", str(npu)], sim)[0]
        if state["scenario"]["behaviour"] == "unsupported" or "power" not in product.queries:
            assert kv.classify_error(power_text).kind == "unsupported"
        else:
            reported = {slot.chip: round(values.power_watts, 1) for slot, values in card
                        if not (product.name == "atlas-a3" and slot.chip == 1)}
            assert {chip: values["power_watts"] for chip, values in kv.parse_power(power_text).items()} == reported
        if state["scenario"]["behaviour"] != "unsupported":
            board = kv.parse_board(board_text)[0]
            assert board["firmware_version"] == sim.firmware_version
            # the card's first chip decides its Compatibility line; SoC boards print none
            assert board.get("compatibility") == (None if product.name == "atlas-200i-a2" else card[0][1].compatibility)


# -- helpers ----------------------------------------------------------------------------------------------


def _state(scenario_name, product_name):
    """A state as prepare_simulation writes it, without touching the disk."""
    checked = load_scenario(scenario_name)
    return {"product": product_name, "scenario": checked, "host": host_with_defaults(checked["host"])}


def _cpu_jiffies(root):
    with open(os.path.join(root, "proc", "stat"), encoding="utf-8") as handle:
        lines = [line.split() for line in handle if line.startswith("cpu") and not line.startswith("cpu ")]
    return [(int(fields[1]), int(fields[4])) for fields in lines]


def _busy_share(before, after, cpus):
    busy = sum(after[cpu][0] - before[cpu][0] for cpu in cpus)
    idle = sum(after[cpu][1] - before[cpu][1] for cpu in cpus)
    return busy / (busy + idle)


def _hang_pids(state_dir):
    path = os.path.join(str(state_dir), HANG_PIDS_FILE)
    deadline = time.monotonic() + 10
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(path, encoding="utf-8") as handle:
        return [int(pid) for pid in handle.read().split()]


def _alive(pid):
    """Running and not a zombie waiting to be reaped."""
    try:
        with open("/proc/{}/stat".format(pid), encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_hbm_leak_grows_one_chips_memory_and_its_process_with_the_same_pid(tmp_path):
    sim = prepare_simulation(str(tmp_path), "hbm-leak", time_scale=0)
    state = read_state(sim.env["NPUMON_SIM_STATE"])
    early, late = ({slot.device_id: values for slot, values in sim_host(state, t).chips} for t in (0.0, 3 * 3600.0))
    assert late[4].memory_used_mb - early[4].memory_used_mb > 0.15 * 65536  # 18 % of 64 GiB in 3 hours
    assert [pid for pid, _, _ in late[4].processes] == [pid for pid, _, _ in early[4].processes]
    assert late[4].processes[0][2] > early[4].processes[0][2]  # the process holds the growth
    assert all(late[device].memory_used_mb == early[device].memory_used_mb for device in early if device != 4)
    # the table npumon reads every poll shows it too
    assert "VLLMEngineCore" in answer(sim, "info").stdout


def test_serving_saturated_queue_only_grows_while_every_chip_is_above_90_percent(tmp_path):
    sim = prepare_simulation(str(tmp_path), "serving-saturated")
    state_dir = sim.env["NPUMON_SIM_STATE"]
    start = read_state(state_dir)["start_time"]
    depths = [serving_queue_depth(state_dir, start + t) for t in range(0, 600, 5)]
    assert all(later > earlier for earlier, later in zip(depths, depths[1:]))
    state = read_state(state_dir)
    assert all(values.aicore_percent > 90 for t in (0.0, 15.0, 300.0) for _, values in sim_host(state, t).chips)


def test_a_process_memory_ramp_is_checked_like_every_other_ramp(tmp_path):
    path = tmp_path / "leak.yaml"
    path.write_text("product: atlas-800i-a2\nchips:\n  default:\n    processes:\n      - {name: p, memory_percent: {start: 1, bogus: 2}}\n")
    with pytest.raises(ScenarioError, match=r"leak\.yaml:5: .*memory_percent\.bogus: unknown key"):
        load_scenario(str(path))


def test_the_shared_state_is_parsed_once_and_read_again_when_the_file_is_replaced(tmp_path):
    state_dir = str(tmp_path / "sim")
    prepare_simulation(state_dir, scenario="healthy", product="atlas-800i-a2")
    first = read_state_shared(state_dir)
    assert read_state_shared(state_dir) is first and first == read_state(state_dir)
    set_scenario(state_dir, "overheat")  # rewrites state.json by rename, as every change does
    changed = read_state_shared(state_dir)
    assert changed is not first and changed["scenario"]["name"] == "overheat"
    others = []
    for index in range(SHARED_STATES):  # the kept parses are bounded: the oldest goes
        other = str(tmp_path / "other{}".format(index))
        prepare_simulation(other, scenario="healthy", product="atlas-800i-a2")
        others.append(read_state_shared(other))
    assert read_state_shared(state_dir) is not changed and read_state_shared(state_dir) == changed
    assert read_state_shared(str(tmp_path / "other{}".format(SHARED_STATES - 1))) is others[-1]
