"""npumon with the real Prometheus tools: Prometheus scraping `npumon run --simulate` through the shipped
fleet scrape config (exporters/prometheus.yml + a file_sd file), `promtool check metrics` on what it
scrapes, and the textfile mode read by a real node_exporter. Each part skips when its binary is missing
(`.ci/run` installs Debian's prometheus and prometheus-node-exporter packages)."""

import os
import shutil
import stat
import subprocess
import sys
import threading
import time

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from daemon_harness import DaemonProcess, free_port, kill_leftovers, sample, wait_until
from npumon import __version__
from npumon.outputs.exporter import ExporterView, build_registry
from npumon.model import ChipSample, HostSample, Snapshot, SourceStatus
from npumon.outputs.textfile import write_textfile
from paths import REPO

pytestmark = pytest.mark.integration

PROMETHEUS = "/usr/bin/prometheus"

# Constant values, so that what Prometheus stored can be compared exactly with what npumon served.
SCENARIO = """\
description: Constant values for the Prometheus integration test.
product: atlas-800i-a2
chips:
  default:
    health: OK
    temperature_celsius: 47
    power_watts: 123.5
    aicore_percent: 61
    aivector_percent: 33
    aicpu_percent: 4
    ctrlcpu_percent: 9
    memory_used_percent: 50
    hbm_bandwidth_percent: 27
  overrides:
    - devices: [3]
      health: Warning
      temperature_celsius: 71
"""

CONFIG = """\
state_dir: {state}
npu_smi_max_concurrent: 4
poll:
  table_seconds: 0.5
  usages_seconds: 1
  power_seconds: 1
  health_seconds: 1
  ecc_seconds: 1
  board_seconds: 1
  host_seconds: 1
"""


def need(path_or_name):
    path = shutil.which(path_or_name)
    if path is None:
        pytest.skip("{} is not installed (Debian: prometheus / prometheus-node-exporter packages)".format(
            path_or_name))
    return path


def promtool_check_metrics(text):
    result = subprocess.run([need("promtool"), "check", "metrics"], input=text.encode(), capture_output=True,
                            timeout=30)
    return result.returncode, (result.stdout + result.stderr).decode()


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "constant.yaml"
    path.write_text(SCENARIO)
    return str(path)


@pytest.fixture
def npumon_daemon(tmp_path, scenario):
    config = tmp_path / "npumon.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state"))
    daemon = DaemonProcess(["--simulate=" + scenario, "--listen", "127.0.0.1:0", "--config", str(config)])
    try:
        daemon.wait_serving()
        yield daemon
    finally:
        daemon.close()


class Prometheus:
    def __init__(self, config_path, storage, port):
        self.port = port
        self.proc = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + config_path, "--storage.tsdb.path=" + storage,
             "--web.listen-address=127.0.0.1:{}".format(port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)

    def api(self, path, **params):
        response = requests.get("http://127.0.0.1:{}/api/v1/{}".format(self.port, path), params=params, timeout=5)
        response.raise_for_status()
        return response.json()["data"]

    def value(self, query):
        """The one value of an instant query, or None while it has no result."""
        result = self.api("query", query=query)["result"]
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def ready(self):
        try:
            return requests.get("http://127.0.0.1:{}/-/ready".format(self.port), timeout=1).status_code == 200
        except requests.ConnectionError:
            assert self.proc.poll() is None, self.proc.stderr.read().decode()[-2000:]
            return False

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def fleet_config(tmp_path, targets):
    """The shipped fleet scrape config, pointed at a file_sd file in tmp_path and sped up to 1 s."""
    with open(os.path.join(REPO, "exporters", "prometheus.yml"), encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    job = config["scrape_configs"][0]
    job["scrape_timeout"] = "1s"
    sd_file = tmp_path / "file_sd" / "npumon-test.yml"
    sd_file.parent.mkdir()
    sd_file.write_text(yaml.safe_dump([{"targets": targets, "labels": {"cluster": "test", "rack": "r0"}}]))
    job["file_sd_configs"][0]["files"] = [str(tmp_path / "file_sd" / "npumon-*.yml")]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_prometheus_scrapes_the_simulator_values(tmp_path, npumon_daemon):
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip("{} is not installed (Debian package prometheus)".format(PROMETHEUS))
    address = "127.0.0.1:{}".format(npumon_daemon.port)
    config = fleet_config(tmp_path, [address])
    check = subprocess.run([need("promtool"), "check", "config", config], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0 and "WARNING" not in check.stdout, check.stdout + check.stderr

    # every value of the snapshot is in place before Prometheus looks; compare with that very document
    def full_status():
        document = npumon_daemon.get("/status").json()
        complete = document["chips"] and all(
            chip["power_watts"] is not None and chip["aivector_ratio"] is not None for chip in document["chips"])
        return document if complete else None

    status = wait_until(full_status, timeout=60, what="a full snapshot")
    prometheus = Prometheus(config, str(tmp_path / "tsdb"), free_port())
    try:
        wait_until(prometheus.ready, timeout=15, what="Prometheus ready")
        target = wait_until(lambda: [t for t in prometheus.api("targets")["activeTargets"] if t["health"] == "up"],
                            timeout=15, what="the npumon target up")[0]
        assert target["labels"]["job"] == "npumon" and target["labels"]["cluster"] == "test"
        assert target["labels"]["instance"] == "127.0.0.1"  # the port is relabelled away

        def stored(query):
            """The value once Prometheus has one (0 included)."""
            return wait_until(lambda: [value for value in [prometheus.value(query)] if value is not None],
                              timeout=10, what=query)[0]

        assert stored('npumon_build_info{{version="{}"}}'.format(__version__)) == 1
        assert stored('npumon_source_up{source="npu-smi"}') == 1
        assert stored('npumon_source_up{source="npu-smi:usages"}') == 1
        chips = {(chip["npu"], chip["chip"]): chip for chip in status["chips"]}
        assert len(chips) == 8
        for (npu, chip_index), chip in chips.items():
            ids = 'npu="{}",chip="{}"'.format(npu, chip_index)
            assert stored("npumon_chip_temperature_celsius{%s}" % ids) == chip["temperature_celsius"]
            assert stored("npumon_chip_power_watts{%s}" % ids) == chip["power_watts"]
            assert stored('npumon_chip_utilization_ratio{%s,engine="aicore"}' % ids) == chip["aicore_ratio"]
            assert stored('npumon_chip_utilization_ratio{%s,engine="aivector"}' % ids) == chip["aivector_ratio"]
            assert stored('npumon_chip_memory_used_bytes{%s,memory="hbm"}' % ids) == chip["hbm_used_bytes"]
            assert stored('npumon_chip_memory_total_bytes{%s,memory="hbm"}' % ids) == chip["hbm_total_bytes"]
            assert stored('npumon_chip_health{%s,state="%s"}' % (ids, chip["health"])) == 1
        # ... and those are the scenario's numbers, in base units
        assert stored('npumon_chip_temperature_celsius{npu="0",chip="0"}') == 47
        assert stored('npumon_chip_temperature_celsius{npu="3",chip="0"}') == 71
        assert stored('npumon_chip_power_watts{npu="0",chip="0"}') == 123.5
        assert stored('npumon_chip_utilization_ratio{npu="0",chip="0",engine="aicore"}') == 0.61
        assert stored('npumon_chip_memory_used_bytes{npu="0",chip="0",memory="hbm"}') == \
            stored('npumon_chip_memory_total_bytes{npu="0",chip="0",memory="hbm"}') / 2
        assert stored('npumon_chip_health{npu="3",chip="0",state="Warning"}') == 1
        assert stored('npumon_chip_health{npu="3",chip="0",state="OK"}') == 0
        assert stored('count(npumon_chip_health{state="OK"} == 1)') == 7
    finally:
        prometheus.stop()

    code, output = promtool_check_metrics(npumon_daemon.get("/metrics").text)
    assert (code, output) == (0, "")


def test_promtool_accepts_metrics_of_a_failing_host(tmp_path):
    """The series of a host whose npu-smi hangs (sources down, no chips) lint clean too."""
    config = tmp_path / "npumon.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state") + "npu_smi_timeout_seconds: 0.5\n")
    daemon = DaemonProcess(["--simulate=hang", "--sim-state", str(tmp_path / "sim"), "--listen", "127.0.0.1:0",
                            "--config", str(config)])
    try:
        daemon.wait_serving()
        wait_until(lambda: sample(daemon.get("/metrics").text, "npumon_source_up", source="npu-smi") == 0,
                   what="npu-smi down")
        code, output = promtool_check_metrics(daemon.get("/metrics").text)
        assert (code, output) == (0, "")
    finally:
        daemon.close()
        kill_leftovers(str(tmp_path / "sim"))


def test_shipped_file_sd_example_is_a_list_of_target_groups():
    with open(os.path.join(REPO, "exporters", "file_sd", "npumon-hosts.yml"), encoding="utf-8") as handle:
        groups = yaml.safe_load(handle)
    assert groups and all(set(group) == {"targets", "labels"} for group in groups)
    assert all(target.rsplit(":", 1)[1] == "9842" for group in groups for target in group["targets"])


# -- textfile mode -----------------------------------------------------------------------------------------

def test_check_writes_a_valid_prom_file_that_node_exporter_serves(tmp_path, scenario):
    directory = tmp_path / "textfile"
    directory.mkdir()
    # a one-card board keeps the pass short
    result = subprocess.run([sys.executable, "-m", "npumon.cli.main", "check", "--simulate=" + scenario,
                             "--sim-product", "atlas-200i-a2", "--textfile", str(directory)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert os.listdir(str(directory)) == ["npumon.prom"]  # no temporary file left
    path = directory / "npumon.prom"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    text = path.read_text()
    assert sample(text, "npumon_chip_temperature_celsius", npu="0", chip="0") == 47
    assert (promtool_check_metrics(text)) == (0, "")

    port = free_port()
    exporter = subprocess.Popen(
        [need("prometheus-node-exporter"), "--collector.disable-defaults", "--collector.textfile",
         "--collector.textfile.directory=" + str(directory), "--web.listen-address=127.0.0.1:{}".format(port)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def scrape():
            try:
                return requests.get("http://127.0.0.1:{}/metrics".format(port), timeout=2).text
            except requests.ConnectionError:
                assert exporter.poll() is None, exporter.stderr.read().decode()[-2000:]
                return None

        served = wait_until(scrape, timeout=10, what="node_exporter serving")
        assert sample(served, "node_textfile_scrape_error") == 0
        assert sample(served, "npumon_chip_temperature_celsius", npu="0", chip="0") == 47
        assert sample(served, "npumon_source_up", source="npu-smi") == 1
    finally:
        exporter.terminate()
        exporter.wait(10)


def test_textfile_is_replaced_atomically_under_a_concurrent_reader(tmp_path):
    """node_exporter may read while npumon writes: every read must be a whole file, old or new."""
    def view(chips):
        return ExporterView(snapshot=Snapshot(
            time=time.time(), host=HostSample(cpu_ratio=0.25),
            chips=[ChipSample(npu=npu, chip=0, name="910B3", health="OK", temperature_celsius=40.0 + npu,
                              power_watts=100.0, aicore_ratio=0.5, hbm_used_bytes=2 ** 30, hbm_total_bytes=2 ** 36)
                   for npu in range(chips)],
            sources={"npu-smi": SourceStatus(ok=True, duration_seconds=0.2)}), findings=[])

    registries = [build_registry(lambda: view(16)), build_registry(lambda: view(1))]
    whole = {sum(len(family.samples) for family in text_string_to_metric_families(
        registry_text(registry))) for registry in registries}
    assert len(whole) == 2
    directory = str(tmp_path / "textfile")
    os.mkdir(directory)
    write_textfile(directory, registries[0])
    done = threading.Event()
    seen = []

    def read_continuously():
        while not done.is_set():
            with open(os.path.join(directory, "npumon.prom"), encoding="utf-8") as handle:
                text = handle.read()
            seen.append(sum(len(family.samples) for family in text_string_to_metric_families(text)))

    reader = threading.Thread(target=read_continuously)
    reader.start()
    try:
        for round_number in range(100):
            write_textfile(directory, registries[round_number % 2])
    finally:
        done.set()
        reader.join(10)
    assert len(seen) > 10 and set(seen) <= whole
    assert os.listdir(directory) == ["npumon.prom"]


def registry_text(registry):
    from prometheus_client.exposition import generate_latest

    return generate_latest(registry).decode()


def test_textfile_units_name_the_same_directory_as_the_cron_example():
    units = os.path.join(REPO, "exporters", "textfile")
    service = open(os.path.join(units, "npumon-textfile.service"), encoding="utf-8").read()
    cron = open(os.path.join(units, "npumon-textfile.cron"), encoding="utf-8").read()
    directory = "/var/lib/node_exporter/textfile_collector"
    assert "--textfile " + directory in service and "--textfile " + directory in cron
    assert "ReadWritePaths=" + directory in service
