"""`npumon fleet-sim`: the generated configs, argument errors, and a start and stop of the real command."""

import os
import random
import signal
import socket
import subprocess
import sys
import time

import psutil
import requests
import yaml

from npumon.settings import parse_config
from npumon.sim.fleet import (DEFAULT_FLEET, SHIPPED_SCRAPE_CONFIG, SimHost, file_sd_groups, fleet_hosts,
                             host_address, host_config, prometheus_config)


def test_every_host_gets_its_own_port_on_127_0_0_1_only():
    addresses = [host_address(i, 19100) for i in range(len(DEFAULT_FLEET))]
    assert addresses[0] == "127.0.0.1:19101"
    assert {a.split(":")[0] for a in addresses} == {"127.0.0.1"}
    assert len({a.split(":")[1] for a in addresses}) == len(addresses)


def test_fleet_hosts_numbers_n_running_hosts_of_the_default_kinds():
    hosts = fleet_hosts(50)
    assert len(hosts) == len({host.name for host in hosts}) == 50 and all(host.running for host in hosts)
    assert hosts[0].name == "sim-a2-healthy-01" and hosts[1].product == "atlas-a3"
    assert {host.scenario for host in hosts} == {host.scenario for host in DEFAULT_FLEET if host.running}
    assert len({host_address(i, 19100) for i in range(50)}) == 50


def test_file_sd_labels_name_the_hosts():
    groups = file_sd_groups(DEFAULT_FLEET, 19100)
    assert groups[1] == {"targets": ["127.0.0.1:19102"],
                         "labels": {"host": "sim-a3-overheat", "scenario": "overheat", "product": "atlas-a3"}}
    assert len({group["labels"]["host"] for group in groups}) == len(DEFAULT_FLEET)


def test_host_configs_are_valid_npumon_configs(tmp_path):
    for host in DEFAULT_FLEET:
        text = yaml.safe_dump(host_config(host, str(tmp_path / host.name), {"table_seconds": 5}))
        config = parse_config(text, host.name + ".yaml")
        assert config.exporter.npu_exporter_compat and config.poll.table_seconds == 5
    control = next(host for host in DEFAULT_FLEET if host.name == "sim-200i-control")
    config = parse_config(yaml.safe_dump(host_config(control, str(tmp_path), {})))
    assert config.control.enabled and config.control.dry_run


def test_host_config_merges_nested_extras():
    host = SimHost("x", "healthy", "atlas-800i-a2", config={"exporter": {"listen": "127.0.0.1:1"}})
    config = host_config(host, "/state", {"table_seconds": 5})
    assert config["exporter"] == {"npu_exporter_compat": True, "listen": "127.0.0.1:1"}


def test_prometheus_config_uses_the_shipped_job(tmp_path):
    config = prometheus_config("/t/targets.json", ["/r.yml"], "2s", "3s")
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "npumon" and job["file_sd_configs"] == [{"files": ["/t/targets.json"],
                                                                         "refresh_interval": "5s"}]
    assert config["global"] == {"scrape_interval": "2s", "evaluation_interval": "3s"} and config["rule_files"] == ["/r.yml"]
    if os.path.exists(SHIPPED_SCRAPE_CONFIG):
        with open(SHIPPED_SCRAPE_CONFIG, encoding="utf-8") as handle:
            shipped = next(j for j in yaml.safe_load(handle)["scrape_configs"] if j["job_name"] == "npumon")
        # the shipped relabelling as it is, then `instance` back to address:port (all hosts share 127.0.0.1)
        assert job["relabel_configs"][:-1] == shipped.get("relabel_configs")
    assert job["relabel_configs"][-1] == {"source_labels": ["__address__"], "target_label": "instance"}
    plain = prometheus_config("/t/targets.json", [], "2s", "2s", shipped_config=str(tmp_path / "none.yml"))
    assert plain["scrape_configs"][0]["job_name"] == "npumon"
    assert plain["scrape_configs"][0]["relabel_configs"] == [{"source_labels": ["__address__"],
                                                              "target_label": "instance"}]


def test_argument_errors_are_one_line(tmp_path, cli):
    for args, message in ((["--base-port", "80"], "--base-port"),
                          (["--hosts", "0"], "--hosts: must be from 1 to 1000"),
                          (["--hosts", "60", "--base-port", "65500"], "--base-port: must be from 1024 to 65475"),
                          (["--prometheus", str(tmp_path / "nope")], "--prometheus: not an executable file"),
                          (["--no-prometheus", "--rules", str(tmp_path / "nope.yml")], "--rules: no such file")):
        result = cli("fleet-sim", *args)  # in-process: each is refused before anything starts
        assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.stderr


def _free_base_port():
    for _ in range(50):
        base = random.randrange(20000, 32000, 10)  # below the ephemeral ports (32768-60999)
        try:
            for index in range(len(DEFAULT_FLEET)):
                address, port = host_address(index, base).split(":")
                with socket.socket() as probe:
                    probe.bind((address, int(port)))
            return base
        except OSError:
            continue
    raise AssertionError("no free ports")


def _listening(directory):
    """(address, port) of every listening socket of the processes that name `directory`."""
    listening = set()
    for proc in psutil.process_iter(["cmdline"]):
        if any(directory in part for part in proc.info["cmdline"] or []):
            try:
                listening |= {(c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                              if c.status == psutil.CONN_LISTEN}
            except psutil.NoSuchProcess:
                continue
    return listening


def test_the_command_starts_the_hosts_and_stops_everything_on_sigterm(tmp_path):
    base = _free_base_port()
    process = subprocess.Popen([sys.executable, "-m", "npumon.cli.main", "fleet-sim", "--no-prometheus", "--dir",
                                str(tmp_path), "--base-port", str(base)], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        banner = [process.stdout.readline() for _ in range(len(DEFAULT_FLEET) + 1)]
        assert banner[0].startswith("simulated fleet in " + str(tmp_path))
        url = "http://{}/metrics".format(host_address(0, base))
        deadline = time.monotonic() + 30
        while True:
            try:
                text = requests.get(url, timeout=2).text
                if "npumon_chip_temperature_celsius" in text:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "the first simulated host never served chip metrics"
            time.sleep(0.5)
        with open(tmp_path / "sim-a2-healthy" / "npumon.yaml", encoding="utf-8") as handle:
            assert yaml.safe_load(handle)["exporter"]["npu_exporter_compat"] is True
        # Every socket the fleet listens on (hosts, their simulated serving endpoints) is on 127.0.0.1.
        expected = {host_address(i, base) for i, host in enumerate(DEFAULT_FLEET) if host.running}
        while True:
            listening = _listening(str(tmp_path))
            if expected <= {"{}:{}".format(*address) for address in listening}:
                break
            assert time.monotonic() < deadline + 30, "not every host listens: {}".format(listening)
            time.sleep(0.5)
        assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        process.stdout.close()
    # Nothing is left running: no process of the fleet (hosts, npu-smi-sim children) names its directory, once
    # the last of them has had up to 5 s to exit.
    def leftovers():
        return [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
                if any(str(tmp_path) in part for part in p.info["cmdline"] or [])]

    deadline = time.monotonic() + 5
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers() == []


def test_a_host_imports_this_npumon_even_from_the_parent_folder_of_a_clone(tmp_path):
    """`python -m` puts its working directory first on sys.path: from the parent folder of a clone named
    `npumon` (no __init__.py at its top: a namespace package) the clone hid an npumon installed with
    `pip install -e`, and every simulated host died with an ImportError."""
    from npumon.sim.fleet import IMPORT_ROOT, host_environment
    import npumon

    (tmp_path / "npumon" / "docs").mkdir(parents=True)  # a clone's top folder, as Python sees it
    base = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    env = host_environment(dict(base, PYTHONPATH="/elsewhere"), {"X": "1"})
    assert env["PYTHONPATH"] == os.pathsep.join([IMPORT_ROOT, "/elsewhere"]) and env["X"] == "1"
    probe = "import sys; sys.path.insert(0, ''); import npumon.cli.main, npumon; print(npumon.__file__)"
    found = subprocess.run([sys.executable, "-c", probe], cwd=str(tmp_path), env=host_environment(base, {}),
                           capture_output=True, text=True, timeout=60)
    assert found.returncode == 0 and found.stdout.strip() == os.path.abspath(npumon.__file__), found.stderr


def test_a_fleet_whose_every_host_dies_at_start_says_so_instead_of_try_npumon_fleet(tmp_path):
    base = _free_base_port()
    with socket.socket() as taken:  # the one host's port is taken (bound, not listening): its `npumon run` exits
        address, port = host_address(0, base).split(":")
        taken.bind((address, int(port)))
        result = subprocess.run([sys.executable, "-m", "npumon.cli.main", "fleet-sim", "--hosts", "1",
                                 "--no-prometheus", "--dir", str(tmp_path), "--base-port", str(base)],
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "try:" not in result.stdout, (result.stdout, result.stderr)
    assert result.stderr.startswith("npumon: every simulated host exited at start; sim-a2-healthy-01's log ends:")
