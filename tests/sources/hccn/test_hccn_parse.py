"""Every real hccn_tool capture (tests/fixtures/hccn/, copied from shared/reference/hccn/captures with its
source header) read by its parser, with the values asserted as the capture prints them."""

import datetime
import os

import pytest

from hccn_captures import capture, capture_names
from npumon.sources.hccn import parse
from npumon.sources.hccn.optical import lanes_outside, parse_optical
from npumon.sources.hccn.parse import HccnParseError



def read(name):
    return capture(name)


def test_link_up_and_the_950_port_form():
    assert parse.parse_link(read("link_up_mc-faultdiag-doc.txt")) == "UP"
    assert parse.parse_link(read("a5_link_ub-port_950-doc.txt")) == "DOWN"


def test_net_health_every_captured_state_and_the_old_spelling():
    assert parse.parse_net_health(read("net_health_success_mc-elastic-doc.txt")) == "Success"
    assert parse.parse_net_health(read("net_health_init_mc-faultdiag-doc.txt")) == "Init"
    assert parse.parse_net_health(read("net_health_fault_mc-elastic-doc.txt")) == "Fault"
    printed = parse.parse_net_health(read("net_health_socket-failed_910a_faultdiag-test.txt"))
    assert printed == "Socket failed" and parse.canonical_net_health(printed) == "Socket fail"


@pytest.mark.parametrize("state", parse.NET_HEALTH_STATES)
def test_net_health_every_state_of_the_source_table(state):
    assert parse.parse_net_health("net health status: {}\n".format(state)) == state
    assert parse.canonical_net_health(state) == state


def test_concatenated_answers_of_three_commands():
    text = read("ip_link_nethealth_expected_thirdparty-doc.txt")
    assert parse.parse_ip(text) == [parse.IpAddress("10.86.1.80", "255.255.255.0")]
    assert parse.parse_link(text) == "UP"
    assert parse.parse_net_health(text) == "Success"


def test_link_stat_current_layout_with_the_down_count():
    stat = parse.parse_link_stat(read("link_stat_with-link-down-count_hccl-doc.txt"))
    assert (stat.up_count, stat.down_count) == (2, 1)
    assert stat.current_time == datetime.datetime(2025, 10, 28, 21, 46, 46)
    assert [(c.time, c.state) for c in stat.changes] == [
        (datetime.datetime(2025, 10, 5, 10, 13, 51), "UP"),
        (datetime.datetime(2025, 10, 5, 10, 13, 50), "DOWN"),
        (datetime.datetime(2025, 10, 5, 10, 13, 35), "UP")]


def test_link_stat_older_layout_without_the_down_count():
    stat = parse.parse_link_stat(read("link_stat_devid-prefix-no-down-count_910a_faultdiag-test.txt"))
    assert (stat.up_count, stat.down_count) == (2, None)
    assert stat.current_time == datetime.datetime(2022, 8, 2, 3, 9, 26)
    assert [(c.time.isoformat(), c.state) for c in stat.changes] == [
        ("2022-08-01T14:43:40", "UP"), ("2022-08-01T14:43:40", "DOWN"), ("2022-08-01T14:43:26", "UP")]


def test_link_stat_oldest_device_prefix_and_no_records():
    text = ("[device 3]current time        : Wed Aug  2 03:09:26 2022\n"
            "[device 3]link up count       : 0\n[device 3]link change records : NA\n")
    stat = parse.parse_link_stat(text)
    assert (stat.up_count, stat.down_count, stat.changes) == (0, None, ())


def test_link_stat_the_950_table_layout():
    stat = parse.parse_link_stat(read("a5_link_stat_table_950-doc.txt"))
    assert (stat.up_count, stat.down_count, stat.current_time) == (2, 2, None)
    assert [(c.time.isoformat(), c.state) for c in stat.changes] == [
        ("2026-02-09T21:45:51", "UP"), ("2026-02-09T21:45:47", "DOWN"),
        ("2026-02-09T21:43:04", "UP"), ("2026-02-09T21:42:59", "DOWN")]


def test_speed_line_unknown_and_the_950_table():
    assert parse.parse_speed(read("speed_inline-quote_thirdparty-note.txt")) == 200000
    assert parse.parse_speed("Speed: Unknown!\n") is None
    assert parse.parse_speed(read("a5_speed_table_950-doc.txt")) == 400000


def test_bandwidth():
    assert parse.parse_bandwidth(read("a5_bandwidth_950-doc.txt")) == (0.0, 266.84)
    assert parse.parse_bandwidth("Bandwidth TX:    12.50 MB/sec\nBandwidth RX:     3.01 MB/sec\n") == (12.5, 3.01)


def test_stat_counters_of_the_partial_captures():
    assert parse.parse_stat(read("stat_trimmed_910a_faultdiag-test.txt")) == {
        "roce_rx_err_pkt_num": 0, "roce_tx_err_pkt_num": 0}
    counters = parse.parse_stat(read("stat_elided_mc-faultdiag-doc.txt"))
    assert counters == {"mac_tx_mac_pause_num": 0, "mac_rx_mac_pause_num": 0, "mac_tx_pfc_pkt_num": 0,
                        "roce_qp_status_err_num": 0, "nic_tx_all_pkg_num": 122404, "nic_tx_all_oct_num": 16921741,
                        "nic_rx_all_pkg_num": 6414803, "nic_rx_all_oct_num": 482237805}


def test_ip_present_missing_and_redacted():
    assert parse.parse_ip(read("ip_910a_faultdiag-test.txt")) == [parse.IpAddress("192.161.200.10", "255.255.255.0")]
    assert parse.parse_ip(read("ip_dev1_910a_faultdiag-test.txt")) == [
        parse.IpAddress("192.161.201.10", "255.255.255.0")]
    assert parse.parse_ip(read("ip_no-ip-configured_empty-stdout_910a_faultdiag-test.txt")) == []
    assert parse.parse_ip(read("ip_redacted_mc-faultdiag-doc.txt")) == [parse.IpAddress("10.xx.xx.10", "255.255.255.0")]
    error = parse.classify_error("", "Get ipconf failed, because no ip was preset there!\n")
    assert error.kind == "no_ip"


def test_gateway_and_netdetect_from_the_source_format_strings():
    assert parse.parse_gateway("default gateway:192.161.200.1, Iface:eth0\n") == "192.161.200.1"
    assert parse.classify_error("", "Get gateway failed, because no gateway was preset there!\n").kind == "no_gateway"
    assert parse.parse_netdetect("netdetect addr: 192.161.200.1\n") == "192.161.200.1"
    assert parse.parse_netdetect("netdetect addr: 0.0.0.0\n") is None


def test_fec_tls_and_the_950_port_table():
    assert parse.parse_fec(read("fec_no-fec_910a_faultdiag-test.txt")) == "no FEC mode"
    assert parse.parse_fec(read("fec_rs_mc-faultdiag-doc.txt")) == "rs FEC mode"
    assert parse.parse_fec("This device does not support switching fec mode.\n") is None
    assert parse.parse_tls_switch(read("tls_switch_grep_mc-faultdiag-doc.txt")) == {
        "dev_id": 0, "switch": 0, "preconfigured": 1, "alarm_days": 60}
    ports = parse.parse_dev_info_ports(read("a5_dev_info_950-doc.txt"))
    assert [(p.udie, p.port, p.speed_gbps, p.port_type, p.link, p.media) for p in ports] == [
        (0, 4, 400, "UB", "UP", "Electrical"), (0, 5, 400, "UB", "UP", "Electrical"),
        (0, 6, 400, "UB", "UP", "Electrical")]


def test_optical_full_four_lane_capture():
    optical = parse_optical(read("optical_4lane_qsfp_910a_faultdiag-test.txt"))
    assert optical.present is False  # as printed, although the lanes carry values (FORMATS.md: test data)
    assert (optical.temperature_celsius, optical.vcc_mv) == (47.0, 3262.90)
    assert optical.tx_power_mw == [4.4035, 1.3968, 1.4140, 1.4988]
    assert optical.rx_power_mw == [1.0189, 0.0054, 0.9907, 1.0213]
    assert optical.tx_bias_ma == [7.9360, 7.9280, 7.9360, 7.9240]
    assert (optical.tx_los, optical.rx_los, optical.tx_lol, optical.rx_lol) == (0, 0xff, 0, 0xff)
    assert optical.thresholds == {
        "vcc_high_mv": 3465.0, "vcc_low_mv": 3135.0, "temp_high_celsius": 70.0, "temp_low_celsius": 0.0,
        "tx_power_high_mw": 3.5481, "tx_power_low_mw": 0.2818, "rx_power_high_mw": 3.5481,
        "rx_power_low_mw": 0.1445}
    assert (optical.vendor, optical.part_number, optical.identifier) == ("Hisense", "LMQ8611-PC+", "QSFP+ or later")
    assert optical.media_snr_db == [23.1211, 22.6289, 22.1875, 23.2969]
    # lane 0 sends above the module's TX high threshold, lane 1 receives below its RX low threshold
    assert lanes_outside(optical.tx_power_mw, 0.2818, 3.5481) == [0]
    assert lanes_outside(optical.rx_power_mw, 0.1445, 3.5481) == [1]


def test_optical_old_single_lane_keys():
    optical = parse_optical(read("optical_elided-old-single-lane-keys_mc-faultdiag-doc.txt"))
    assert optical.present is False and optical.temperature_celsius is None
    assert (optical.tx_power_mw, optical.rx_power_mw, optical.tx_bias_ma) == ([4.4035], [1.0189], [7.9360])
    assert optical.thresholds["rx_power_low_mw"] == 0.1445 and optical.rx_lol == 0xff


def test_optical_absent_module_prints_na():
    text = ("optical info:\npresent              : not present\ntemperature          : NA\n"
            "Vcc                  : NA\nTx Power             : NA\nRx Power             : NA\n"
            "Vcc High Thres       : NA\n")
    optical = parse_optical(text)
    assert (optical.present, optical.temperature_celsius, optical.vcc_mv) == (False, None, None)
    assert optical.tx_power_mw == [None] and optical.thresholds == {"vcc_high_mv": None}


@pytest.mark.parametrize("text", ["", "garbage\n", "link status: SIDEWAYS\n"])
def test_not_an_answer_is_the_parsers_own_error(text):
    for parser in (parse.parse_link, parse.parse_net_health, parse.parse_link_stat, parse.parse_speed,
                   parse.parse_bandwidth, parse.parse_gateway, parse.parse_netdetect, parse_optical):
        with pytest.raises(HccnParseError):
            parser(text)


def test_errors_are_matched_on_their_text_not_the_colliding_exit_codes():
    assert parse.classify_error("The command is not supported on this product.\n").kind == "unsupported"
    assert parse.classify_error("", "Get device health status failed!\n").kind == "not_ready"
    assert parse.classify_error("link status: UP\n") is None


def test_every_capture_has_a_test_here():
    with open(os.path.abspath(__file__), encoding="utf-8") as handle:
        source = handle.read()
    assert [name for name in capture_names() if 'read("{}")'.format(name) not in source] == []
