"""The interconnect parsers (`-t hccs`, `-t hccs-bw`, `-t sio-info`) against the reference's formats.

Fixtures: `info-t-hccs_3links_rust-unit-test_normalised.txt` is the real 3-link block a public Rust unit test
("parse_real_hccs_block") carries, spacing normalised, as shared/reference/interconnect-and-compute.md 1.2 quotes
it; `info-t-hccs_910b_healthy_printer-layout.txt` is the healthy 8x910B baseline a validator over real captures
asserts (7 links, lane mode 4, lane list 1111, speed 224, first error lane NA, retry/CRC 0), laid out as the
driver's printer prints it (`\\t%-30s : `, `%-20u ` per link).
"""

import os

import pytest

from npumon.sim.scenario import load_scenario
from npumon.sim.links import render_hccs, render_hccs_310p, render_hccs_bandwidth, render_sio
from npumon.sim.values import chip_values_at
from npumon.sources.npusmi.common import NpuSmiParseError
from npumon.sources.npusmi.links import link_numbers, parse_hccs, parse_hccs_bandwidth, parse_sio
from tests.paths import FIXTURES


def _fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read().split("# ---\n", 1)[1]


def test_real_three_link_block_gives_counters_and_no_lane_fields():
    hccs = parse_hccs(_fixture("info-t-hccs_3links_rust-unit-test_normalised.txt"), chip=0)[0]["hccs"]
    assert hccs["health"] == "OK" and hccs["first_error_lane"] is None
    assert [link["link"] for link in hccs["links"]] == [1, 2, 3]
    assert [link["tx_packets"] for link in hccs["links"]] == [1993002168, 1434439505, 1588783520]
    assert all(link["retries"] == 0 and link["crc_errors"] == 0 for link in hccs["links"])
    assert all(link["lane_mode"] is None and link["rx_packets"] is None for link in hccs["links"])


def test_healthy_910b_baseline():
    hccs = parse_hccs(_fixture("info-t-hccs_910b_healthy_printer-layout.txt"), chip=1)[1]["hccs"]
    links = hccs["links"]
    assert [link["link"] for link in links] == list(range(1, 8))
    assert {(link["lane_mode"], link["lanes"], link["speed_gbps"]) for link in links} == {(4, "1111", 224)}
    assert links[2]["rx_packets"] == 1581234001
    assert hccs["first_error_lane"] is None


def test_nine_thousand_superpod_prints_links_two_to_seven():
    assert link_numbers(6) == [2, 3, 4, 5, 6, 7]
    assert link_numbers(7) == [1, 2, 3, 4, 5, 6, 7]


def test_nok_with_first_error_link():
    text = "\thccs health status             : NOK\n\thccs lane mode                 : [2   4   ]\n" \
           "\thccs first error lane          : 3\n"
    hccs = parse_hccs(text, chip=0)[0]["hccs"]
    assert hccs["health"] == "NOK" and hccs["first_error_lane"] == 3
    assert [link["lane_mode"] for link in hccs["links"]] == [2, 4]


@pytest.mark.parametrize("text, problem", [
    ("\thccs lane mode : [4 4]\n\thccs link speed : [224]\n", "differ in length"),
    ("\thccs lane mode : 4 4\n", "is not a \\[..\\] list"),
    ("\thccs health status : MAYBE\n", "neither OK nor NOK"),
    ("\thccs link lane list : [11x1]\n", "0/1 digits"),
    ("\tTX Error Count : 0\n", "none of the hccs lines"),
    ("garbage\n", "no 'key : value' line"),
])
def test_bad_hccs_output_is_one_clear_error(text, problem):
    with pytest.raises(NpuSmiParseError, match=problem):
        parse_hccs(text, chip=0)


def test_hccs_bandwidth_rows_and_total():
    text = ("%-30s %-30s %-30s\n" % ("hccs link", "tx_bandwidth(GB/S)", "rx_bandwidth(GB/S)")
            + "%-35d %-30.6f %-30.6f\n" % (1, 12.5, 11.25) + "%-35d %-30.6f %-30.6f\n" % (2, 0.0, 0.5)
            + "%-35s %-30.6f %-30.6f\n" % ("total", 12.5, 11.75))
    bandwidth = parse_hccs_bandwidth(text, chip=0)[0]["hccs_bandwidth"]
    assert bandwidth["links"] == [{"link": 1, "tx_gbps": 12.5, "rx_gbps": 11.25},
                                  {"link": 2, "tx_gbps": 0.0, "rx_gbps": 0.5}]
    assert (bandwidth["total_tx_gbps"], bandwidth["total_rx_gbps"]) == (12.5, 11.75)
    with pytest.raises(NpuSmiParseError, match="no link row"):
        parse_hccs_bandwidth("hccs link tx_bandwidth(GB/S) rx_bandwidth(GB/S)\n", chip=0)
    with pytest.raises(NpuSmiParseError, match="header"):
        parse_hccs_bandwidth("1 2 3\n", chip=0)


def test_sio_counts():
    assert parse_sio("\tTX Error Count : 7\n\tRX Error Count : 0\n", chip=1) == {
        1: {"sio": {"tx_errors": 7, "rx_errors": 0}}}
    with pytest.raises(NpuSmiParseError, match="RX Error Count"):
        parse_sio("\tTX Error Count : 7\n", chip=0)


def test_simulated_links_read_back():
    values = chip_values_at(load_scenario("hccs-degraded")["chips"], 3, 120.0, 65536, 1800)
    hccs = parse_hccs("\n".join(render_hccs(values)) + "\n", chip=0)[0]["hccs"]
    link3 = hccs["links"][2]
    assert (link3["link"], link3["lane_mode"], link3["lanes"], link3["speed_gbps"]) == (3, 2, "1100", 112)
    assert link3["crc_errors"] == 1520 + 2 * 40 and hccs["links"][0]["crc_errors"] == 0
    assert link3["tx_packets"] == hccs["links"][0]["tx_packets"] // 2 == 12 * 5e7 * 120 // 2
    bandwidth = parse_hccs_bandwidth("\n".join(render_hccs_bandwidth(values)) + "\n", chip=0)[0]["hccs_bandwidth"]
    assert [link["tx_gbps"] for link in bandwidth["links"]][:3] == [12.0, 12.0, 6.0]
    assert bandwidth["total_tx_gbps"] == 78.0
    sio = chip_values_at(load_scenario("sio-errors")["chips"], 4, 60.0, 65536, 1800)
    assert parse_sio("\n".join(render_sio(sio)) + "\n", chip=0)[0]["sio"] == {"tx_errors": 39, "rx_errors": 29}


def test_the_300i_duos_statistics_only_block_is_its_index_zero():
    # interconnect-and-compute.md 1.2: the 310P prints only packets, bytes, retry and error, for index 0
    text = ("\thccs tx packets                : [1993002168          ]\n"
            "\thccs rx packets                : [1434439505          ]\n"
            "\thccs tx bytes                  : [39860043360         ]\n"
            "\thccs rx bytes                  : [28688790100         ]\n"
            "\thccs retry count               : [3                   ]\n"
            "\thccs error count               : [41                  ]\n")
    assert parse_hccs(text, chip=1) == {1: {"hccs": {"health": None, "first_error_lane": None, "links": [
        {"link": 0, "lane_mode": None, "lanes": None, "speed_gbps": None, "tx_packets": 1993002168,
         "rx_packets": 1434439505, "retries": 3, "crc_errors": 41}]}}}
    # a one-link block that prints its health is numbered as the others (link 1)
    assert parse_hccs("\thccs health status : OK\n" + text, chip=0)[0]["hccs"]["links"][0]["link"] == 1
    values = chip_values_at(load_scenario("hccs-degraded")["chips"], 3, 60.0, 44280, 1080)
    (link,) = parse_hccs("\n".join(render_hccs_310p(values)) + "\n", chip=0)[0]["hccs"]["links"]
    assert (link["link"], link["crc_errors"], link["retries"]) == (0, 1520 + 40, 300 + 12)
