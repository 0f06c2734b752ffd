"""The daemon in compat mode against the simulator: npu-exporter's families on a listener of their own
(`exporter.npu_exporter_listen`, as a scrape config made for npu-exporter expects), the `node` label, and the
identities on /status and the native info metric."""

import logging

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from daemon_harness import wait_until
from npumon.config.errors import ConfigError
from npumon.settings import parse_config
from npumon.daemon.daemon import Daemon
from npumon.sim import prepare_simulation
from npumon.sim.target import simulated_target

CONFIG = """\
state_dir: {state}
poll: {{table_seconds: 0.3, usages_seconds: 0.5, power_seconds: 0.5, health_seconds: 0.5, ecc_seconds: 1,
        board_seconds: 1, identity_seconds: 5, common_seconds: 1, memory_seconds: 1, volt_seconds: 1}}
exporter:
  npu_exporter_compat: true
  npu_exporter_listen: 127.0.0.1:0
  node_label: $NODE_NAME
"""


def families(url):
    text = requests.get(url, timeout=5).text
    return {family.name: family for family in text_string_to_metric_families(text)}


@pytest.fixture
def daemon(tmp_path, monkeypatch, running):
    monkeypatch.setenv("NODE_NAME", "worker-7")
    simulation = prepare_simulation(str(tmp_path / "sim"), "healthy")
    target = simulated_target(simulation)
    config = parse_config(CONFIG.format(state=tmp_path / "state"), str(tmp_path / "npumon.yaml"))
    return running(Daemon(config, target, listen="127.0.0.1:0"))


def test_npu_exporter_port_serves_its_families_alone_with_the_node_label(daemon):
    url = "http://127.0.0.1:{}/metrics".format(daemon.npu_exporter_web.port)

    def complete():
        found = families(url)
        return found if "npu_chip_info_voltage" in found and "npu_chip_info_hbm_temperature" in found and \
            all(s.labels["vdie_id"] for s in found["npu_chip_info_name"].samples) else None

    found = wait_until(complete, timeout=30)
    assert not [name for name in found if name.startswith(("npumon_", "process_", "python_", "go_"))]
    for family in found.values():
        for sample in family.samples:
            assert sample.labels["node"] == "worker-7", family.name
    assert sorted(int(s.labels["id"]) for s in found["npu_chip_info_name"].samples) == list(range(8))
    main = families("http://127.0.0.1:{}/metrics".format(daemon.web.port))
    assert "npumon_chip_info" in main and "npu_chip_info_name" in main  # compat on the main port as well
    infos = main["npumon_chip_info"].samples
    assert sorted(int(s.labels["device_id"]) for s in infos) == list(range(8))
    assert all(s.labels["vdie_id"] and s.labels["phy_id"] == "" for s in infos)
    status = requests.get("http://127.0.0.1:{}/status".format(daemon.web.port), timeout=5).json()
    assert [chip["device_id"] for chip in status["chips"]] == list(range(8))


def test_no_compat_series_is_served_before_its_chip_identity_is_known(daemon):
    """Consumers join on vdie_id (HAMi-WebUI, the MindX DL dashboards): a series served without it and replaced
    minutes later shows nothing meanwhile. Every scrape from the start has the ids, or no chip series yet."""
    url = "http://127.0.0.1:{}/metrics".format(daemon.npu_exporter_web.port)
    seen_empty, scrapes = [], 0

    def identified():
        nonlocal scrapes
        scrapes += 1
        samples = families(url).get("npu_chip_info_name")
        samples = samples.samples if samples else []
        seen_empty.extend(s.labels["id"] for s in samples if not s.labels["vdie_id"])
        return len(samples) == 8 or None

    wait_until(identified, timeout=30, interval=0.05)
    assert seen_empty == [] and scrapes > 1, (seen_empty, scrapes)
    assert families(url)["machine_npu_nums"].samples[0].value == 8  # the host's own series from the start


def test_the_start_line_names_the_npu_exporter_listener(tmp_path, running, caplog):
    caplog.set_level(logging.INFO, logger="npumon.daemon.daemon")
    simulation = prepare_simulation(str(tmp_path / "sim"), "healthy")
    config = parse_config(CONFIG.format(state=tmp_path / "state").replace("$NODE_NAME", "n1"),
                          str(tmp_path / "npumon.yaml"))
    daemon = running(Daemon(config, simulated_target(simulation), listen="127.0.0.1:0"))
    started = [record.getMessage() for record in caplog.records if "serving on port" in record.getMessage()]
    assert len(started) == 1 and "; npu-exporter compatible /metrics on port {} at http://127.0.0.1:{};".format(
        daemon.npu_exporter_web.port, daemon.npu_exporter_web.port) in started[0], started


def test_npu_exporter_listen_needs_compat_and_a_good_address(tmp_path):
    with pytest.raises(ConfigError, match="npu_exporter_listen: needs npu_exporter_compat: true"):
        parse_config("exporter:\n  npu_exporter_listen: 0.0.0.0:8082\n", "x.yaml")
    with pytest.raises(ConfigError, match=r"x.yaml:3: exporter.npu_exporter_listen: .*has no port"):
        parse_config("exporter:\n  npu_exporter_compat: true\n  npu_exporter_listen: nowhere\n", "x.yaml")
