"""How many DCMI calls a sweep makes: each one costs a driver round trip (about 17 ms in AReaL's measurement), so
a sweep asks only what it needs -- rates the HBM and multi-rate answers carry are not asked again, a card's
device count only in the static sweep, an error code's text once, a quick `npumon check` only health, error
codes and ECC. The simulated libdcmi.so is loaded in this process (no faults: nothing here hangs or crashes),
with a Library that counts what npumon asks of it."""

import collections

import pytest

from npumon.sim.dcmi import set_dcmi_faults
from npumon.sim.simulation import prepare_simulation
from npumon.sources.dcmi import read
from npumon.sources.dcmi.library import load

pytestmark = pytest.mark.integration


class CountingLibrary:
    """The loaded library, counting each call by name (and by input type for the typed rate calls)."""

    def __init__(self, library):
        self.library = library
        self.api = library.api
        self.calls = collections.Counter()

    def call(self, name, *args):
        typed = name in ("dcmi_get_device_utilization_rate", "dcmi_get_device_frequency")
        self.calls["{}:{}".format(name, args[2]) if typed else name] += 1
        return self.library.call(name, *args)


@pytest.fixture
def a3(tmp_path, monkeypatch, library):
    sim = prepare_simulation(str(tmp_path / "sim"), product="atlas-a3", scenario="health-critical", time_scale=0)
    monkeypatch.setenv("NPUMON_SIM_STATE", sim.env["NPUMON_SIM_STATE"])  # where the library finds its state
    loaded = load(library)
    assert loaded.initialise()[0] == "v1"
    return CountingLibrary(loaded), sim


def _sweep(api, unsupported, **options):
    api.library.calls.clear()
    answer = read.sweep(api, unsupported, **options)
    unsupported |= {tuple(item) for item in answer["unsupported"]}
    return answer, api.library.calls


def _critical(answer):
    (chip,) = [record["values"] for record in answer["chips"] if record["values"].get("health") == "Critical"]
    return chip


def test_a_steady_sweep_does_not_ask_what_another_answer_carried(a3):
    counting, _ = a3
    api, unsupported = read.Api(counting), set()
    _sweep(api, unsupported, static=True)
    answer, calls = _sweep(api, unsupported, static=False)
    chips = len(answer["chips"])
    assert chips == 16
    # the HBM answer carries the HBM usage and bandwidth rates: no type 6 or 10 rate call
    assert calls["dcmi_get_device_utilization_rate:6"] == calls["dcmi_get_device_utilization_rate:10"] == 0
    # the multi-rate answer carries AI Core, cube, vector and overall: no type 2, 12, 13, 14 call
    assert not [name for name in calls if name.split(":")[-1] in ("2", "12", "13", "14")
                and name.startswith("dcmi_get_device_utilization_rate")]
    # a card's device count is asked by the static sweep only; device types once per worker
    assert calls["dcmi_get_card_list"] == 1 and calls["dcmi_get_device_num_in_card"] == 0
    assert calls["dcmi_get_device_type"] == 0
    # unsupported calls are not asked again (A3: die 1's power, DDR ECC, the DDR rates)
    assert calls["dcmi_get_device_power_info"] == chips // 2 and calls["dcmi_get_device_memory_info_v3"] == 0
    assert calls["dcmi_get_device_ecc_info"] == chips
    # an error code's text is the driver's: asked once, not every sweep
    assert calls["dcmi_get_device_errorcode_string"] == 0
    chip = _critical(answer)  # logic id 2, the scenario's chip with an error code
    assert chip["hbm_usage_ratio"] == (chip["hbm_used_bytes"] * 100 // chip["hbm_total_bytes"]) / 100.0
    assert chip["hbm_bandwidth_ratio"] is not None and chip["error_information"]
    assert sum(calls.values()) <= 11 * chips + 1, calls


def test_a_quick_pass_asks_health_error_codes_and_ecc_only(a3):
    counting, _ = a3
    api = read.Api(counting)
    answer, calls = _sweep(api, set(), static=False, only=read.QUICK_METRICS)
    asked = {name for name in calls if calls[name]}
    assert asked <= {"dcmi_get_card_list", "dcmi_get_device_num_in_card", "dcmi_get_device_type",
                     "dcmi_get_device_health", "dcmi_get_device_errorcode_v2", "dcmi_get_device_errorcode_string",
                     "dcmi_get_device_ecc_info"}, asked
    values = _critical(answer)
    assert values["error_codes"] == ["80CB8009"] and "ecc.hbm" in values
    assert "temperature_celsius" not in values and "vdie_id" not in values


def test_a_card_that_leaves_the_list_loses_its_count_and_one_that_comes_back_is_asked_again(a3):
    counting, sim = a3
    api, unsupported = read.Api(counting), set()
    _sweep(api, unsupported, static=True, only={"health"})
    set_dcmi_faults(sim.env["NPUMON_SIM_STATE"], codes={"dcmi_get_device_num_in_card": -8005})
    answer, calls = _sweep(api, unsupported, static=False, only={"health"})
    assert calls["dcmi_get_device_num_in_card"] == 0 and len(answer["chips"]) == 16  # the counts it had
    answer, calls = _sweep(api, unsupported, static=True, only={"health"})
    assert calls["dcmi_get_device_num_in_card"] == 8 and answer["chips"] == []
    assert answer["problems"][0] == "card 0: dcmi_get_device_num_in_card returned -8005 DCMI_ERR_CODE_INNER_ERR"
    set_dcmi_faults(sim.env["NPUMON_SIM_STATE"])
    answer, calls = _sweep(api, unsupported, static=False, only={"health"})
    assert calls["dcmi_get_device_num_in_card"] == 8 and len(answer["chips"]) == 16


def test_the_950_is_read_through_the_v2_api_alone(tmp_path, monkeypatch, library):
    # Its driver answers dcmiv2_* (one logical id per chip) and refuses dcmi_init: every call npumon makes there
    # is a V2 one, and the chips come out numbered as npu-smi numbers them (NPU = logical id, chip 0).
    sim = prepare_simulation(str(tmp_path / "sim"), product="atlas-350", scenario="health-critical", time_scale=0)
    monkeypatch.setenv("NPUMON_SIM_STATE", sim.env["NPUMON_SIM_STATE"])
    loaded = load(library)
    chosen, tried = loaded.initialise()
    assert (chosen, tried) == ("v2", ["dcmi_init: -8255 DCMI_ERR_CODE_NOT_SUPPORT"])
    counting = CountingLibrary(loaded)
    api, unsupported = read.Api(counting), set()
    first, calls = _sweep(api, unsupported, static=True)
    assert all(name.startswith("dcmiv2_") for name in calls), sorted(calls)
    assert [(record["npu"], record["chip"]) for record in first["chips"]] == [(npu, 0) for npu in range(8)]
    chip = _critical(first)
    assert chip["name"] == "Ascend950PR" and chip["error_codes"] == ["80CB8009"] and chip["device_id"] == 2
    assert chip["vdie_id"].count("-") == 4 and chip["serial_number"].startswith("10264L5408")
    assert chip["hbm_total_bytes"] == 131072 * 1048576 and "aicube_ratio" in chip and "power_watts" in chip
    assert read.versions(loaded)["dcmi_version"]
