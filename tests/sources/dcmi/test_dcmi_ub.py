"""The DCMI reader of the 950's UB ports against the simulated libdcmi.so: the chip's link state and every port's
state and counters under npu-exporter's names, only in the sweeps that ask; a V1 product has no UB call and is
marked unsupported once. The UB struct has the size the reference measured on the driver header."""

import ctypes

import pytest

from npumon.sim.simulation import prepare_simulation
from npumon.sources.dcmi import read, structs
from npumon.sources.dcmi.library import load

from test_dcmi_read_calls import CountingLibrary, _sweep

pytestmark = pytest.mark.integration


def _api(tmp_path, monkeypatch, library, scenario, product, api):
    sim = prepare_simulation(str(tmp_path / "sim"), product=product, scenario=scenario, time_scale=0)
    monkeypatch.setenv("NPUMON_SIM_STATE", sim.env["NPUMON_SIM_STATE"])
    loaded = load(library)
    assert loaded.initialise()[0] == api
    return read.Api(CountingLibrary(loaded))


def test_ub_ports_only_when_asked_with_their_states_and_counters(tmp_path, monkeypatch, library):
    api, unsupported = _api(tmp_path, monkeypatch, library, "ub-degraded", "atlas-350", "v2"), set()
    answer, calls = _sweep(api, unsupported, static=False)
    assert calls["dcmiv2_get_ub_port_link_status"] == 0 and not any("ub" in r["values"] for r in answer["chips"])
    answer, calls = _sweep(api, unsupported, static=False, links={"ub"})
    # per chip: the status, then the counters of each of its three ports
    assert (calls["dcmiv2_get_ub_port_link_status"], calls["dcmiv2_get_port_pkt_stats_info"]) == (8, 8 * 3)
    assert "ub" not in {metric for _, _, metric in unsupported} and all(not r["problems"] for r in answer["chips"])
    values = {r["npu"]: r["values"]["ub"] for r in answer["chips"]}
    assert values[0]["link_status"] == "linked"
    assert [(p["udie"], p["port"], p["status"]) for p in values[0]["ports"]] == [
        (0, 4, "full"), (0, 5, "full"), (0, 6, "full")]
    partial = values[2]["ports"][1]
    assert (partial["port"], partial["status"]) == (5, "partial_lanes")
    assert (partial["counters"]["crc_error_sum"], partial["counters"]["retry_req_sum"]) == (880, 150)
    assert values[2]["ports"][0]["counters"]["crc_error_sum"] == 0
    assert values[6]["link_status"] == "partial" and values[6]["ports"][0]["status"] == "down"
    # npu-exporter's names for the MindCluster header's fields, all 48 of them
    counters = partial["counters"]
    assert len(counters) == 48 and {"ub_ipv4_pkt_cnt_rx", "ub_compact_pkt_cnt_tx", "tx_busi_flit_num",
                                    "core_mib_txbadoctets"} <= set(counters)
    assert not any(name.startswith(("ub_glb_", "ub_clan_")) for name in counters)


def test_ub_bandwidth_of_the_linked_ports_only_when_asked(tmp_path, monkeypatch, library):
    api, unsupported = _api(tmp_path, monkeypatch, library, "ub-degraded", "atlas-350", "v2"), set()
    answer, calls = _sweep(api, unsupported, static=False, links={"ub_bw"})
    # per chip: the status, then one bandwidth call per linked port (device 6's port 4 is not linked)
    assert calls["dcmiv2_get_ub_realtime_bandwidth_info"] == 8 * 3 - 1 and calls["dcmiv2_get_port_pkt_stats_info"] == 0
    values = {r["npu"]: r["values"]["ub_bandwidth"]["ports"] for r in answer["chips"]}
    assert values[2] == [{"udie": 0, "port": 4, "tx_mbps": 12000, "rx_mbps": 12000},
                         {"udie": 0, "port": 5, "tx_mbps": 6000, "rx_mbps": 6000},
                         {"udie": 0, "port": 6, "tx_mbps": 12000, "rx_mbps": 12000}]
    assert [port["port"] for port in values[6]] == [5, 6]


def test_a_v1_product_has_no_ub_call_and_is_not_asked_again(tmp_path, monkeypatch, library):
    api, unsupported = _api(tmp_path, monkeypatch, library, "healthy", "atlas-800i-a2", "v1"), set()
    _sweep(api, unsupported, static=False, links={"ub"})
    assert {(npu, metric) for npu, _, metric in unsupported if metric == "ub"} == {(npu, "ub") for npu in range(8)}
    answer, calls = _sweep(api, unsupported, static=False, links={"ub"})
    assert calls["dcmiv2_get_ub_port_link_status"] == 0 and not any("ub" in r["values"] for r in answer["chips"])


def test_ub_link_status_struct_has_the_size_the_reference_measured():
    # shared/reference/interconnect-and-compute.md 1.4: 148 bytes (an enum and 36 enums); the packet counters 520
    assert (ctypes.sizeof(structs.dcmi_ub_port_link_status), ctypes.sizeof(structs.dcmi_port_pkt_stats_info),
            ctypes.sizeof(structs.dcmi_ub_bandwidth_info)) == (148, 520, 16)


@pytest.mark.slow
def test_ub_errors_rising_through_dcmi_over_two_real_sweeps(tmp_path, library):
    """The daemon's path in miniature: two DCMI sweeps a few seconds apart on a fast scenario clock (a scenario
    minute per 0.1 s), the rule engine over both: device 2's CRC errors rose, ub-errors-rising names its port."""
    import time

    from npumon.cli.check import load_rule_engine
    from npumon.settings import parse_config
    from npumon.sim.target import simulated_target, simulation_config
    from npumon.sources.collection import SourceSet

    sim = prepare_simulation(str(tmp_path / "sim"), scenario="ub-degraded", time_scale=600)
    config = simulation_config(parse_config(
        "collect: {{backend: dcmi}}\ndcmi: {{library: {}}}\npoll: {{ub_seconds: 1, ub_bw_seconds: 0}}\n".format(
            library)), str(tmp_path / "sim"))
    sources = SourceSet(config, simulated_target(sim), skip=("probe", "hccn", "kmsg", "processes"))
    engine, _ = load_rule_engine(config, one_shot=False)
    try:
        first = sources.collect_once(full=True)
        engine.evaluate(first, now=first.time)
        time.sleep(2.0)
        second = sources.collect_once(full=True)
        findings = engine.evaluate(second, now=second.time)
    finally:
        sources.close()
    counts = [next(c for c in s.chips if c.npu == 2).ub["ports"][1]["counters"]["crc_error_sum"]
              for s in (first, second)]
    assert counts[1] > counts[0] >= 880
    rising = [f for f in findings if f.rule == "ub-errors-rising"]
    assert [f.subject for f in rising] == ["npu2/chip0"]
    assert "port 0/5: " in rising[0].summary
