"""The DCMI link readers against the simulated libdcmi.so: read only in the sweeps that ask for them, decoded
like npu-smi prints them (a NOK health with its first faulty link, a narrowed link's lanes, the counters), and
marked unsupported once on a product without links."""

import ctypes

import pytest

from npumon.sim.simulation import prepare_simulation
from npumon.sources.dcmi import read, structs
from npumon.sources.dcmi.library import load

from test_dcmi_read_calls import CountingLibrary, _sweep

pytestmark = pytest.mark.integration

NOK_SCENARIO = """\
description: link 3 of device 3 narrowed, and the chip's HCCS not healthy
product: atlas-800i-a2
chips:
  default: {hccs_traffic_gbps: 12}
  overrides:
    - {devices: [3], hccs_health: NOK, hccs_degraded_link: 3, hccs_degraded_lanes: 1, hccs_crc_errors: 77,
       hccs_retries: 5}
"""


def _api(tmp_path, monkeypatch, library, scenario, product=None):
    sim = prepare_simulation(str(tmp_path / "sim"), product=product, scenario=scenario, time_scale=0)
    monkeypatch.setenv("NPUMON_SIM_STATE", sim.env["NPUMON_SIM_STATE"])
    loaded = load(library)
    assert loaded.initialise()[0] == "v1"
    return read.Api(CountingLibrary(loaded))


def test_links_only_when_asked_and_decoded_as_npu_smi_prints_them(tmp_path, monkeypatch, library):
    path = tmp_path / "nok.yaml"
    path.write_text(NOK_SCENARIO)
    api, unsupported = _api(tmp_path, monkeypatch, library, str(path)), set()
    answer, calls = _sweep(api, unsupported, static=False)
    assert calls["dcmi_get_device_info"] == 0 and not any("hccs" in r["values"] for r in answer["chips"])
    answer, calls = _sweep(api, unsupported, static=False, links={"hccs", "hccs_bw", "sio"})
    # per chip: status, lane info, u64 statistics, and the SIO call the 910B refuses
    assert calls["dcmi_get_device_info"] == 8 * 4
    assert calls["dcmi_get_hccs_link_bandwidth_info"] == 8
    assert "sio" in {metric for _, _, metric in unsupported} and "hccs" not in {m for _, _, m in unsupported}
    values = {(r["npu"], r["chip"]): r["values"] for r in answer["chips"]}
    hccs = values[(3, 0)]["hccs"]
    assert (hccs["health"], hccs["first_error_lane"]) == ("NOK", 3)
    link3 = hccs["links"][2]
    assert link3 == {"link": 3, "lane_mode": 1, "lanes": "1000", "speed_gbps": 56, "tx_packets": 0,
                     "rx_packets": 0, "retries": 5, "crc_errors": 77}
    assert [link["link"] for link in hccs["links"]] == list(range(1, 8))
    healthy = values[(0, 0)]["hccs"]
    assert healthy["health"] == "OK" and healthy["first_error_lane"] is None
    assert {(link["lane_mode"], link["lanes"], link["speed_gbps"]) for link in healthy["links"]} == {(4, "1111", 224)}
    bandwidth = values[(3, 0)]["hccs_bandwidth"]
    assert [link["tx_gbps"] for link in bandwidth["links"]][:3] == [12.0, 12.0, 3.0]
    assert bandwidth["total_tx_gbps"] == 75.0


def test_the_300i_duo_answers_its_hccs_statistics_alone_as_index_zero(tmp_path, monkeypatch, library):
    api, unsupported = _api(tmp_path, monkeypatch, library, "hccs-degraded", product="atlas-300i-duo"), set()
    answer, calls = _sweep(api, unsupported, static=False, links={"hccs", "hccs_bw"})
    # per chip: the status it refuses, then the u64 statistics; no bandwidth call on the 310P
    assert calls["dcmi_get_device_info"] == 4 * 2 and "hccs" not in {m for _, _, m in unsupported}
    assert "hccs_bw" in {m for _, _, m in unsupported}
    values = {(r["npu"], r["chip"]): r["values"]["hccs"] for r in answer["chips"]}
    assert values[(5, 1)] == {"health": None, "first_error_lane": None, "links": [
        {"link": 0, "lane_mode": None, "lanes": None, "speed_gbps": None, "tx_packets": 0, "rx_packets": 0,
         "retries": 300, "crc_errors": 1520}]}


def test_a_product_without_links_refuses_them_once(tmp_path, monkeypatch, library):
    api, unsupported = _api(tmp_path, monkeypatch, library, "healthy", product="atlas-200i-a2"), set()
    _sweep(api, unsupported, static=False, links={"hccs", "hccs_bw", "sio"})
    assert {metric for _, _, metric in unsupported} >= {"hccs", "hccs_bw", "sio"}
    _, calls = _sweep(api, unsupported, static=False, links={"hccs", "hccs_bw", "sio"})
    assert calls["dcmi_get_device_info"] == 0 and calls["dcmi_get_hccs_link_bandwidth_info"] == 0


def test_link_structs_have_the_sizes_the_reference_measured_on_the_driver_header():
    # shared/reference/interconnect-and-compute.md 1.4 (gcc on the driver's header): 12, 132, 280, 12 and 1024 bytes
    assert [ctypes.sizeof(cls) for cls in (structs.dcmi_hccs_statues, structs.dcmi_hccs_lane_info,
                                           structs.dcmi_hccs_bandwidth_info, structs.dcmi_sio_crc_err_statistic_info,
                                           structs.dcmi_hccs_statistic_info_u64)] == [12, 132, 280, 12, 1024]
