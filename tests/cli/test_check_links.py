"""`npumon check --full` on the interconnect scenarios: the finding on the right chip and link with its repair
action, on each product that has the links; `healthy` raises none of the link findings on any product. The 950's
UB ports are read through DCMI only (collect.backend: dcmi). Through the CLI's main() in the test's process (the
`cli` fixture): the same exit code and JSON as the executable, without an interpreter start per product."""

import json

import pytest

from npumon.sim.products import PRODUCTS

LINK_RULES = ("hccs-", "sio-", "ub-")


def check_full(cli, *args):
    proc = cli("check", "--json", "--full", "--no-probe", "--timeout", "60", *args)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return proc, json.loads(proc.stdout)


@pytest.mark.parametrize("product, subject", [("atlas-800i-a2", "npu3/chip0"), ("atlas-a3", "npu1/chip1")])
def test_hccs_degraded_names_the_chip_and_link(cli, product, subject):
    proc, doc = check_full(cli, "--simulate=hccs-degraded", "--sim-product", product)
    assert proc.returncode == 1, doc["findings"]  # warnings: the link works, narrower
    found = {finding["rule"]: finding for finding in doc["findings"]}
    assert set(found) == {"hccs-lanes-degraded", "hccs-link-bandwidth-low"}
    assert {finding["subject"] for finding in found.values()} == {subject}
    lanes = found["hccs-lanes-degraded"]
    assert lanes["summary"].startswith("HCCS link 3 runs 2 lanes (112 Gb/s)")
    assert lanes["repair_action"] == "inspect_hardware" and "HCCL_EXEC_TIMEOUT" in lanes["hint"]
    assert "HCCS link 3 carries 12.0 GB/s, 50%" in found["hccs-link-bandwidth-low"]["summary"]
    chip = next(chip for chip in doc["chips"] if "npu{}/chip{}".format(chip["npu"], chip["chip"]) == subject)
    assert chip["hccs"]["links"][2]["crc_errors"] >= 1520 and chip["hccs"]["health"] == "OK"


def test_sio_errors_on_the_a3(cli):
    proc, doc = check_full(cli, "--simulate=sio-errors")
    assert proc.returncode == 0  # a standing count is an info finding; its rise needs two polls (the daemon)
    assert sorted((f["rule"], f["subject"]) for f in doc["findings"]) == [
        ("sio-crc-errors", "npu2/chip0"), ("sio-crc-errors", "npu2/chip1")]
    assert [chip["sio"] for chip in doc["chips"] if chip["npu"] == 2] == [
        {"tx_errors": 24, "rx_errors": 18}, {"tx_errors": 24, "rx_errors": 18}]


@pytest.mark.parametrize("product", sorted(PRODUCTS))
def test_healthy_raises_no_link_finding(cli, product):
    proc, doc = check_full(cli, "--simulate=healthy", "--sim-product", product)
    assert [f["rule"] for f in doc["findings"] if f["rule"].startswith(LINK_RULES)] == []
    has_hccs = PRODUCTS[product].family in ("910b", "910_93", "310p")  # the 310P: its one index's counters
    assert doc["sources"]["npu-smi:hccs"]["unsupported"] is not has_hccs
    assert all((chip["hccs"] is not None) is has_hccs for chip in doc["chips"])


def test_the_300i_duo_reads_its_one_hccs_index_and_judges_its_errors(cli):
    proc, doc = check_full(cli, "--simulate=hccs-degraded", "--sim-product", "atlas-300i-duo")
    # one pass: standing counts raise nothing (their rise needs two polls), and there is no lane mode to judge
    assert proc.returncode == 0 and doc["findings"] == []
    hccs = {(chip["npu"], chip["chip"]): chip["hccs"] for chip in doc["chips"]}
    assert hccs[(2, 0)]["health"] is None and [link["link"] for link in hccs[(2, 0)]["links"]] == [0]
    # device 3 (card 5 chip 1) counts the scenario's CRC errors on its one index
    assert hccs[(5, 1)]["links"][0]["crc_errors"] >= 1520 and hccs[(5, 1)]["links"][0]["lane_mode"] is None


def dcmi_config(tmp_path):
    path = tmp_path / "dcmi.yaml"
    path.write_text("collect: {backend: dcmi}\n")
    return "--config={}".format(path)


def test_ub_degraded_names_the_chips_and_ports_through_dcmi(cli, tmp_path):
    proc, doc = check_full(cli, "--simulate=ub-degraded", dcmi_config(tmp_path))
    assert proc.returncode == 2, doc["findings"]  # a port that should be linked is not
    assert doc["sources"]["dcmi"]["ok"] and doc["sources"]["npu-smi"]["backend"] == "dcmi"
    found = sorted((f["rule"], f["subject"], f.get("repair_action")) for f in doc["findings"])
    # check has one sample: the bandwidth rule's `for` does not hold it back (device 6 has two linked ports: no median)
    assert found == [("ub-port-bandwidth-low", "npu2/chip0", None), ("ub-port-down", "npu6/chip0", "inspect_hardware"),
                     ("ub-port-lanes-partial", "npu2/chip0", "inspect_hardware")]
    chips = {chip["npu"]: chip["ub"] for chip in doc["chips"]}
    assert [port["status"] for port in chips[2]["ports"]] == ["full", "partial_lanes", "full"]
    assert chips[2]["ports"][1]["counters"]["crc_error_sum"] >= 880 and chips[6]["link_status"] == "partial"
    bandwidth = {chip["npu"]: chip["ub_bandwidth"] for chip in doc["chips"]}
    assert [port["tx_mbps"] for port in bandwidth[2]["ports"]] == [12000, 6000, 12000]


def test_ub_ports_are_not_read_through_npu_smi(cli):
    # npu-smi has no UB query: on the default backend the ports stay unread and raise nothing
    proc, doc = check_full(cli, "--simulate=ub-degraded")
    assert proc.returncode == 0 and doc["findings"] == []
    assert all(chip["ub"] is None for chip in doc["chips"])


def test_healthy_950_raises_no_link_finding_through_dcmi(cli, tmp_path):
    proc, doc = check_full(cli, "--simulate=healthy", "--sim-product", "atlas-350", dcmi_config(tmp_path))
    assert [f["rule"] for f in doc["findings"] if f["rule"].startswith(LINK_RULES)] == []
    assert all(chip["ub"]["link_status"] == "linked" for chip in doc["chips"])
