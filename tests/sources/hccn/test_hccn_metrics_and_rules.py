"""The network scenarios through the same path as real hardware (the simulated hccn_tool, the source, the rules,
the exporter): each network rule fires on its scenario for its chip and nothing else does; `healthy` stays
quiet; the native families carry base units and the compat families npu-exporter's; promtool is content."""

import shutil
import subprocess

import pytest

from clocked_host import ClockedHost
from exposition_text import exposition, family_samples
from simulated_pass import judged_pass
from npumon.settings import parse_config
from npumon.sim.simulation import prepare_simulation

# scenario -> the findings one full pass raises (each scenario's chip: its overrides' device id)
ONE_PASS = {
    "healthy": set(),
    "link-down": {("network-link-down", "npu5/chip0")},
    "link-flap": {("network-link-flapping", "npu1/chip0")},
    "net-health-fail": {("network-health-failed", "npu6/chip0")},
    "optical-degraded": {("network-optical-out-of-range", "npu3/chip0")},
    "network-misconfigured": {("network-speed-low", "npu0/chip0"), ("network-ip-missing", "npu7/chip0"),
                              ("network-gateway-missing", "npu7/chip0")},
    "network-not-ready": {("network-not-ready", "npu2/chip0")},  # left out, and its network is unknown: a warning
    "roce-errors": set(),  # a rise needs history (below)
    "pfc-storm": set(),
}


def full_pass(tmp_path, scenario, product=None):
    return judged_pass(tmp_path / scenario, scenario, "probe: {enabled: false}\nnetwork: {timeout_seconds: 1}\n",
                       product)


@pytest.mark.parametrize("scenario", sorted(ONE_PASS))
def test_each_network_rule_fires_on_its_scenario_and_only_there(tmp_path, scenario):
    snapshot, findings = full_pass(tmp_path, scenario)
    fired = {(finding.rule, finding.subject) for finding in findings if finding.rule.startswith("network-")}
    assert fired == ONE_PASS[scenario]
    assert all(finding.hint and "{" not in finding.hint for finding in findings)
    assert {name for name, status in snapshot.sources.items() if name.startswith("hccn") and not status.ok} == set()


@pytest.mark.parametrize("scenario, rule, subject, summary, within", [
    ("roce-errors", "network-roce-errors-rising", "npu4/chip0", "RoCE error packets rising", 600),
    ("pfc-storm", "network-pfc-storm", "npu2/chip0", "a PFC pause storm", 900),
])
def test_counter_rules_fire_over_clocked_polls(tmp_path, scenario, rule, subject, summary, within):
    sim = prepare_simulation(str(tmp_path / "sim"), scenario, time_scale=1)
    host = ClockedHost(parse_config("state_dir: {}\nprobe: {{enabled: false}}\n".format(tmp_path / "state")), sim)
    try:
        started = host.clock()
        while (rule, subject) not in {(f.rule, f.subject) for f in host.step()}:
            assert host.clock() - started < within, sorted((f.rule, f.subject) for f in host.findings)
        assert {(f.rule, f.subject) for f in host.findings if f.rule.startswith("network-")} == {(rule, subject)}
        assert summary in next(f.summary for f in host.findings if f.rule == rule)
    finally:
        host.close()




def test_native_families_in_base_units_and_compat_families_as_npu_exporter_serves_them(tmp_path):
    snapshot, _ = full_pass(tmp_path, "link-down")
    native = exposition(snapshot, compat=False)
    def key(npu, **labels):
        return tuple(sorted(dict(labels, npu=str(npu), chip="0").items()))

    chip0, chip5 = key(0), key(5)
    assert family_samples(native, "npumon_chip_network_link_up")[chip0] == 1 and \
        family_samples(native, "npumon_chip_network_link_up")[chip5] == 0
    speeds = family_samples(native, "npumon_chip_network_speed_bytes_per_second")
    assert speeds[chip0] == 25e9 and chip5 not in speeds  # `Speed: Unknown!` while down
    power = family_samples(native, "npumon_chip_network_optical_power_watts")
    assert power[key(0, direction="rx", lane="0")] == pytest.approx(1.0189e-3)
    assert family_samples(native, "npumon_chip_network_optical_power_threshold_watts")[
        key(0, bound="low", direction="rx")] == pytest.approx(0.1445e-3)
    assert family_samples(native, "npumon_chip_network_health")[key(0, state="Success")] == 1
    assert family_samples(native, "npumon_chip_network_stat")[key(0, counter="roce_rx_err_pkt_num")] == 0
    assert family_samples(native, "npumon_chip_network_link_down_events")[chip5] == 1
    assert family_samples(native, "npumon_chip_network_ip_configured")[chip0] == 1
    compat = exposition(snapshot, compat=True)
    link = {dict(labels)["id"]: value for labels, value in family_samples(compat, "npu_chip_info_link_status").items()}
    assert link["0"] == 1 and link["5"] == 0
    speed = {dict(labels)["id"]: value for labels, value in family_samples(compat, "npu_chip_link_speed").items()}
    assert speed["0"] == 200000 and "5" not in speed
    rx = {dict(labels)["id"]: value for labels, value in family_samples(compat, "npu_chip_optical_rx_power_0").items()}
    assert rx["0"] == 1.0189
    vcc = {dict(labels)["id"]: value for labels, value in family_samples(compat, "npu_chip_optical_vcc").items()}
    assert vcc["0"] == 3262.9
    assert set(family_samples(compat, "npu_chip_roce_rx_err_pkt_num").values()) == {0}
    status = {dict(labels)["id"]: value
              for labels, value in family_samples(compat, "npu_chip_info_network_status").items()}
    assert set(status.values()) == {1} and len(status) == 8


def test_no_network_families_on_a_product_without_ports(tmp_path):
    snapshot, _ = full_pass(tmp_path, "healthy", product="atlas-300i-duo")
    text = exposition(snapshot, compat=True)
    assert "npumon_chip_network_" not in text and "npu_chip_info_link_status" not in text


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not on PATH (Debian: apt-get install prometheus)")
def test_promtool_check_metrics_is_content_with_the_network_families(tmp_path):
    snapshot, _ = full_pass(tmp_path, "optical-degraded")
    result = subprocess.run(["promtool", "check", "metrics"], input=exposition(snapshot, False).encode(),
                            capture_output=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    result = subprocess.run(["promtool", "check", "metrics"], input=exposition(snapshot, True).encode(),
                            capture_output=True, timeout=30)
    assert {line for line in result.stderr.decode().splitlines() if "camelCase" not in line} == set()
