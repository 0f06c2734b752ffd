"""The hccn source end to end: a fake hccn_tool printing real captures feeds `npumon check --json`; a chip whose
calls block costs the others nothing; products without ports and hosts without the tool are unsupported."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from hccn_captures import HCCN_FIXTURES
from npumon.config.load import parse_config
from npumon.sim.simulation import prepare_simulation
from npumon.sources.collection import SourceSet
from npumon.sources.hccn.source import HccnSource, has_ports
from npumon.sources.target import Target

# -i <phy> -<cmd> -g -> the capture it prints (phy 0); phys 1 and 2 differ where a capture exists for them
FAKE_TOOL = textwrap.dedent('''\
    #!{python}
    import os, sys
    fixtures = {fixtures!r}
    def capture(name):
        return open(os.path.join(fixtures, name)).read().split("# ---\\n", 1)[1]
    args = sys.argv[1:]
    phy, command = args[1], args[2]
    if args[0] != "-i" or args[3:] != ["-g"]:
        sys.stderr.write("Get invalid major cmd.\\n"); sys.exit(3)
    if command == "-ip" and phy == "2":
        sys.stderr.write("Get ipconf failed, because no ip was preset there!\\n"); sys.exit(13)
    if command == "-gateway":
        sys.stderr.write("Get gateway failed, because no gateway was preset there!\\n"); sys.exit(2)
    answers = {{
        "-link": "link_up_mc-faultdiag-doc.txt",
        "-link_stat": "link_stat_with-link-down-count_hccl-doc.txt",
        "-net_health": "net_health_socket-failed_910a_faultdiag-test.txt",
        "-speed": "speed_inline-quote_thirdparty-note.txt",
        "-bandwidth": "a5_bandwidth_950-doc.txt",
        "-stat": "stat_elided_mc-faultdiag-doc.txt",
        "-optical": "optical_4lane_qsfp_910a_faultdiag-test.txt",
        "-ip": "ip_dev1_910a_faultdiag-test.txt" if phy == "1" else "ip_910a_faultdiag-test.txt",
    }}
    if command == "-netdetect":
        print("netdetect addr: 0.0.0.0")
    elif command in answers:
        sys.stdout.write(capture(answers[command]))
    else:
        sys.stderr.write("Get invalid major cmd.\\n"); sys.exit(3)
    ''')


def fake_hccn_tool(directory):
    path = directory / "hccn_tool"
    path.write_text(FAKE_TOOL.format(python=sys.executable, fixtures=HCCN_FIXTURES))
    path.chmod(0o755)
    return path


@pytest.mark.integration
def test_check_json_reports_the_captures_values_in_the_right_chips_network(tmp_path):
    tool = fake_hccn_tool(tmp_path)
    config = tmp_path / "npumon.yaml"
    config.write_text("network: {{hccn_tool: {}}}\nprobe: {{enabled: false}}\n".format(tool))
    proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "check", "--simulate", "--full", "--json",
                           "--timeout", "60", "--config", str(config)], capture_output=True, text=True, timeout=120)
    document = json.loads(proc.stdout)
    assert document["sources"]["hccn"]["ok"] is True, document["sources"]["hccn"]
    chips = {(chip["npu"], chip["chip"]): chip for chip in document["chips"]}
    network = chips[(0, 0)]["network"]
    assert network["phy_id"] == 0
    assert network["link_status"] == "UP"
    assert (network["link_up_count"], network["link_down_count"]) == (2, 1)
    assert [(change["time"][:19], change["state"]) for change in network["link_changes"]] == [
        ("2025-10-05T10:13:51", "UP"), ("2025-10-05T10:13:50", "DOWN"), ("2025-10-05T10:13:35", "UP")]
    assert network["net_health"] == "Socket failed"
    assert network["speed_mbps"] == 200000
    assert network["bandwidth_rx_bytes_per_second"] == 266.84e6 and network["bandwidth_tx_bytes_per_second"] == 0
    assert network["optical_present"] is False
    assert network["rx_power_mw"] == [1.0189, 0.0054, 0.9907, 1.0213]
    assert network["tx_power_mw"] == [4.4035, 1.3968, 1.4140, 1.4988]
    assert network["counters"]["nic_rx_all_oct_num"] == 482237805
    assert network["ip_addresses"] == [{"address": "192.161.200.10", "netmask": "255.255.255.0"}]
    assert (network["gateway"], network["gateway_configured"], network["netdetect_address"]) == (None, False, None)
    assert chips[(1, 0)]["network"]["ip_addresses"] == [{"address": "192.161.201.10", "netmask": "255.255.255.0"}]
    assert chips[(2, 0)]["network"]["ip_addresses"] == []
    fired = {(finding["rule"], finding["subject"]) for finding in document["findings"]}
    # "Socket failed" (the older spelling) is a failed net health; the capture's lane 0 TX is above its module's
    # high threshold and lane 1 RX below the low one; npu2 has no IP while the others have one
    assert ("network-health-failed", "npu0/chip0") in fired
    assert ("network-optical-out-of-range", "npu0/chip0") in fired
    assert ("network-ip-missing", "npu2/chip0") in fired and ("network-ip-missing", "npu0/chip0") not in fired
    assert ("network-link-down", "npu0/chip0") not in fired
    # the NET column of the table
    table = subprocess.run([sys.executable, "-m", "npumon.cli.main", "check", "--simulate", "--full", "--timeout", "60",
                            "--config", str(config)], capture_output=True, text=True, timeout=120).stdout
    rows = [line.split() for line in table.splitlines() if line.startswith(("NPU  CHIP", "0  "))]
    assert rows[0][-2:] == ["NET", "PROBE"] and rows[1][-4:] == ["UP", "Socket", "failed", "-"]


def collection_for(tmp_path, scenario, config_text=""):
    sim = prepare_simulation(str(tmp_path / "sim"), scenario, time_scale=0, latency_scale=0)
    config = parse_config("probe: {enabled: false}\n" + config_text)
    return SourceSet(config, Target(sim.npu_smi_argv, sim.env, sim.root, simulated=True, spawn=sim.spawn))


def test_a_chip_whose_calls_block_delays_neither_the_other_chips_nor_the_main_table(tmp_path):
    collection = collection_for(tmp_path, "network-not-ready", "network: {timeout_seconds: 1.5}\n")
    try:
        collection.poll("npu-smi")
        durations = {}

        def timed(tier):
            began = time.monotonic()
            collection.poll(tier)
            durations[tier] = time.monotonic() - began

        network = threading.Thread(target=timed, args=("hccn",))
        network.start()
        time.sleep(0.2)  # the blocked chip's call is running now
        timed("npu-smi")  # the main table meanwhile
        network.join()
        snapshot = collection.snapshot()
        assert durations["npu-smi"] < 1.0, durations  # it did not wait for the blocked hccn_tool call
        assert durations["hccn"] < 1.5 + 1.0, durations  # the blocked call ends at its deadline
        links = [chip.extra["network"]["link_status"] for chip in snapshot.chips]
        assert links == ["UP", "UP", None, "UP", "UP", "UP", "UP", "UP"]
        status = snapshot.sources["hccn"]
        assert status.ok and status.degraded and "npu2/chip0 (phy 2) -link: timed out" in status.error
        assert "may not be ready" in status.error
        # next polls leave the not-ready chip alone instead of waiting out its deadline again
        for tier in ("hccn", "hccn:optical"):
            timed(tier)
            assert durations[tier] < 1.0, durations
        assert "npu2/chip0 (phy 2): not ready, left alone" in collection.snapshot().sources["hccn"].error
    finally:
        collection.close()


@pytest.mark.parametrize("product", ["atlas-300i-duo", "atlas-200i-a2"])
def test_products_without_ports_are_unsupported_not_failing(tmp_path, product):
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy", product=product, time_scale=0, latency_scale=0)
    collection = SourceSet(parse_config("probe: {enabled: false}\n"),
                           Target(sim.npu_smi_argv, sim.env, sim.root, simulated=True, spawn=sim.spawn))
    try:
        snapshot = collection.collect_once()
    finally:
        collection.close()
    status = snapshot.sources["hccn"]
    assert status.ok and status.unsupported and "no chip of this product has an NPU network port" in status.error
    assert snapshot.chips and all(chip.extra["network"] is None for chip in snapshot.chips)


def test_a_host_without_hccn_tool_is_unsupported_and_an_unreachable_one_fails(tmp_path):
    collection = collection_for(tmp_path, "healthy", "network: {{hccn_tool: {}}}\n".format(tmp_path / "absent"))
    try:
        snapshot = collection.collect_once()
    finally:
        collection.close()
    status = snapshot.sources["hccn"]
    assert status.ok and status.unsupported and "no hccn_tool at" in status.error
    locked = tmp_path / "tools"
    locked.mkdir()
    fake_hccn_tool(locked)
    locked.chmod(0)
    try:
        if os.access(str(locked), os.X_OK):
            pytest.skip("running as root: a mode-0 directory does not keep root out")
        settings = parse_config("network: {{hccn_tool: {}}}\n".format(locked / "hccn_tool")).network
        source = HccnSource(settings, [settings.hccn_tool], None, 120.0)
        source.poll("hccn", [])
        assert "cannot reach" in source.statuses(time.time())["hccn"].error
    finally:
        locked.chmod(0o755)


def test_the_physical_id_comes_from_info_m_when_the_chips_carry_none(tmp_path):
    collection = collection_for(tmp_path, "healthy")
    try:
        collection.poll("npu-smi")
        # a quick pass on an A2 without the identity file: the table gives neither id
        chips = [dataclasses.replace(chip, device_id=None, phy_id=None) for chip in collection.snapshot().chips]
        source = next(source for source in collection.sources if source.name == "hccn")
        source.poll("hccn", chips)
        networks = source.networks(time.time(), chips)
    finally:
        collection.close()
    assert [networks[chip.key]["phy_id"] for chip in chips] == list(range(8))
    assert all(networks[chip.key]["link_status"] == "UP" for chip in chips)


def test_has_ports():
    assert has_ports("910B3") and has_ports("Ascend910") and has_ports("910A")
    assert not has_ports("310P3") and not has_ports("310B4") and not has_ports(None)


@pytest.mark.slow
@pytest.mark.integration
def test_the_daemon_serves_the_network_on_metrics_and_status(tmp_path):
    from daemon_harness import DaemonProcess, kill_leftovers, sample, wait_until

    config = tmp_path / "npumon.yaml"
    config.write_text("state_dir: {}\nprobe: {{enabled: false}}\nexporter: {{npu_exporter_compat: true}}\n"
                      "network: {{link_seconds: 2, stat_seconds: 2, bandwidth_seconds: 0, optical_seconds: 0, "
                      "config_seconds: 0}}\n".format(tmp_path / "state"))
    sim_state = str(tmp_path / "sim")
    daemon = DaemonProcess(["--config", str(config), "--simulate=link-down", "--sim-state", sim_state,
                            "--listen", "127.0.0.1:0"])
    try:
        daemon.wait_serving()
        text = wait_until(lambda: (lambda text: text if sample(text, "npumon_chip_network_link_up", npu="5",
                                                                chip="0") is not None else None)(
            daemon.get("/metrics").text), timeout=30, what="the network tier's first poll")
        assert sample(text, "npumon_chip_network_link_up", npu="5", chip="0") == 0
        assert sample(text, "npumon_chip_network_link_up", npu="0", chip="0") == 1
        assert sample(text, "npumon_source_up", source="hccn") == 1
        status = daemon.get("/status").json()
        assert status["chips"][5]["network"]["link_status"] == "DOWN"
        assert ("network-link-down", "npu5/chip0") in {(f["rule"], f["subject"]) for f in status["findings"]}
        assert "hccn:optical" not in status["sources"]  # a tier at 0 s is off
    finally:
        daemon.close()
        kill_leftovers(sim_state)
