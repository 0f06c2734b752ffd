"""The interconnect families: npumon's own in base units and npu-exporter's with its names, labels and units
(GB/s, counts, ms), per link number; none on a chip without links."""

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from npumon.model import ChipSample, HostSample, Snapshot
from npumon.outputs.exporter import ExporterView, build_registry


def _chip(npu, name, links=range(1, 8), sio=None):
    return ChipSample(
        npu=npu, chip=0, name=name, health="OK", bus_id="0000:C{}:00.0".format(npu), model_name=name + "-Ascend-V1",
        hccs=None if links is None else {"health": "OK", "first_error_lane": None, "links": [
            {"link": n, "lane_mode": 2 if n == 3 else 4, "lanes": "1100" if n == 3 else "1111",
             "speed_gbps": 112 if n == 3 else 224, "tx_packets": 100 + n, "rx_packets": 200 + n,
             "retries": 7 if n == 3 else 0, "crc_errors": 40 if n == 3 else 0} for n in links]},
        hccs_bandwidth=None if links is None else {"total_tx_gbps": 78.0, "total_rx_gbps": 77.5, "links": [
            {"link": n, "tx_gbps": 6.0 if n == 3 else 12.0, "rx_gbps": 5.5 if n == 3 else 12.0} for n in links]},
        sio=sio)


def _samples(chips):
    snapshot = Snapshot(time=1.0, host=HostSample(), chips=chips, sources={})
    text = generate_latest(build_registry(lambda: ExporterView(snapshot=snapshot, findings=[]),
                                          npu_exporter_compat=True)).decode("utf-8")
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def _value(samples, name, **labels):
    matches = [value for (sample, keys), value in samples.items()
               if sample == name and set(labels.items()) <= set(keys)]
    assert len(matches) <= 1, (name, labels)
    return matches[0] if matches else None


def test_native_families_in_base_units():
    samples = _samples([_chip(0, "910B3", sio={"tx_errors": 3, "rx_errors": 1})])
    assert _value(samples, "npumon_hccs_healthy", npu="0") == 1
    assert _value(samples, "npumon_hccs_first_error_link", npu="0") is None  # health OK: no faulty link
    assert _value(samples, "npumon_hccs_link_lanes", npu="0", link="3") == 2
    assert _value(samples, "npumon_hccs_link_speed_bytes_per_second", link="3") == 112e9 / 8
    assert _value(samples, "npumon_hccs_link_packets", link="3", direction="rx") == 203
    assert _value(samples, "npumon_hccs_link_crc_errors", link="3") == 40
    assert _value(samples, "npumon_hccs_link_retries", link="3") == 7
    assert _value(samples, "npumon_hccs_link_bandwidth_bytes_per_second", link="3", direction="tx") == 6e9
    assert _value(samples, "npumon_sio_crc_errors", direction="tx") == 3


def test_compat_families_per_link_number():
    samples = _samples([_chip(0, "910B3"), _chip(1, "910B3", links=range(2, 8))])
    assert _value(samples, "npu_chip_info_hccs_statistic_info_tx_cnt_3", id="0") == 103
    assert _value(samples, "npu_chip_info_hccs_statistic_info_rx_cnt_3", id="0") == 203
    assert _value(samples, "npu_chip_info_hccs_statistic_info_crc_err_cnt_3", id="0") == 40
    assert _value(samples, "npu_chip_info_hccs_bandwidth_info_tx_3", id="0") == 6.0  # GB/s as npu-exporter
    assert _value(samples, "npu_chip_info_hccs_bandwidth_info_rx_3", id="0") == 5.5
    assert _value(samples, "npu_chip_info_hccs_bandwidth_info_total_rx", id="0") == 77.5
    assert _value(samples, "npu_chip_info_hccs_bandwidth_info_profiling_time", id="0") == 200
    # a 9000 A3 SuperPoD board numbers its links 2-7: no link 1 series, as npu-exporter
    assert _value(samples, "npu_chip_info_hccs_statistic_info_tx_cnt_1", id="1") is None
    assert _value(samples, "npu_chip_info_hccs_statistic_info_tx_cnt_2", id="1") == 102
    labels = next(keys for (name, keys) in samples if name == "npu_chip_info_hccs_statistic_info_tx_cnt_1")
    assert {key for key, _ in labels} == {"id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name",
                                          "container_name"}


def test_no_link_series_without_links():
    samples = _samples([_chip(0, "310P3", links=None)])
    assert not [name for name, _ in samples if "hccs" in name or "_sio_" in name]


def _ub_chip(npu, second_port="partial_lanes"):
    counters = {"crc_error_sum": 12, "retry_req_sum": 3, "retry_ack_sum": 1, "tx_busi_flit_num": 500,
                "rx_busi_flit_num": 400, "ub_ipv4_pkt_cnt_rx": 9}
    ports = [{"udie": 0, "port": port, "status": status, "counters": dict(counters)}
             for port, status in ((4, "full"), (5, second_port), (6, "down"))]
    chip = _chip(npu, "Ascend950PR", links=None)
    chip.ub = {"link_status": "partial", "ports": ports}
    chip.ub_bandwidth = {"ports": [{"udie": 0, "port": 4, "tx_mbps": 12000, "rx_mbps": 11000}]}
    return chip


def test_ub_native_families_per_port():
    samples = _samples([_ub_chip(0)])
    assert _value(samples, "npumon_ub_link_state", npu="0", state="partial") == 1
    assert _value(samples, "npumon_ub_link_state", npu="0", state="linked") == 0
    assert _value(samples, "npumon_ub_port_linked", udie="0", port="5") == 1
    assert _value(samples, "npumon_ub_port_linked", port="6") == 0
    assert _value(samples, "npumon_ub_port_full_width", port="4") == 1
    assert _value(samples, "npumon_ub_port_full_width", port="5") == 0
    assert _value(samples, "npumon_ub_port_full_width", port="6") is None  # not linked: no width
    assert _value(samples, "npumon_ub_port_crc_errors", port="5") == 12
    assert _value(samples, "npumon_ub_port_retries", port="5", kind="ack") == 1
    assert _value(samples, "npumon_ub_port_flits", port="4", direction="rx") == 400
    assert _value(samples, "npumon_ub_port_bandwidth_bytes_per_second", port="4", direction="rx") == 11000e6


def test_ub_compat_families_carry_udie_and_port():
    samples = _samples([_ub_chip(0)])
    assert _value(samples, "npu_chip_info_crc_error_sum", id="0", udie="0", port="5") == 12
    assert _value(samples, "npu_chip_info_ub_ipv4_pkt_cnt_rx", id="0", port="4") == 9
    assert _value(samples, "npu_chip_info_ub_ipv6_pkt_cnt_rx", id="0", port="4") is None  # not in the answer
    labels = next(keys for (name, keys) in samples if name == "npu_chip_info_crc_error_sum")
    assert {key for key, _ in labels} == {"id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name",
                                          "container_name", "udie", "port"}


def test_no_ub_series_without_ub_ports():
    samples = _samples([_chip(0, "910B3")])
    assert not [name for name, _ in samples if "_ub_" in name or name.startswith("npu_chip_info_crc_error_sum")]
