"""Per-process chip memory: a series for each of a chip's largest processes, the rest summed; the check table's
PROCESSES section."""

import shutil
import subprocess

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from npumon.config.errors import ConfigError
from npumon.settings import parse_config
from npumon.model import MIB, ChipSample, HostSample, ProcessSample, Snapshot, SourceStatus
from npumon.outputs.exporter import ExporterView, build_registry
from npumon.outputs.report import render_table

NOW = 1767225600.0


def busy_snapshot(processes_on_chip0=14):
    """Chip 0 runs `processes_on_chip0` processes of 1..N GiB plus one of unknown size; chip 1 runs none."""
    processes = [ProcessSample(npu=0, chip=0, pid=1000 + i, name="worker-{}".format(i), memory_bytes=(i + 1) * 1024 * MIB)
                 for i in range(processes_on_chip0)]
    processes.append(ProcessSample(npu=0, chip=0, pid=999, name=None, memory_bytes=None))
    chips = [ChipSample(npu=0, chip=0, name="910B3", health="OK", processes=processes),
             ChipSample(npu=1, chip=0, name="910B3", health="OK")]
    return Snapshot(time=NOW, host=HostSample(hostname="atlas-01"), chips=chips,
                    sources={"npu-smi": SourceStatus(ok=True, last_success=NOW)})


def scrape(snapshot, **kwargs):
    text = generate_latest(build_registry(lambda: ExporterView(snapshot=snapshot, findings=[]), **kwargs)).decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return text, found


def test_the_ten_largest_processes_of_a_chip_get_a_series_and_the_rest_are_summed():
    _, found = scrape(busy_snapshot())
    per_process = found["npumon_chip_process_memory_bytes"]
    assert sorted(dict(labels)["pid"] for labels in per_process) == [str(1000 + i) for i in range(4, 14)]
    assert per_process[(("chip", "0"), ("name", "worker-13"), ("npu", "0"), ("pid", "1013"))] == 14 * 1024 * MIB
    # workers 0..3 (1+2+3+4 GiB) and the process of unknown size are not listed one by one
    assert found["npumon_chip_process_memory_other_bytes"] == {(("chip", "0"), ("npu", "0")): 10 * 1024 * MIB}
    assert found["npumon_chip_processes"][(("chip", "0"), ("npu", "0"))] == 15
    # a chip without processes has the count and nothing else
    assert not any(dict(labels)["npu"] == "1" for labels in per_process)
    assert (("chip", "0"), ("npu", "1")) not in found["npumon_chip_process_memory_other_bytes"]


def test_process_series_per_chip_bounds_the_series_and_zero_leaves_only_the_sum():
    _, found = scrape(busy_snapshot(), process_series_per_chip=3)
    assert sorted(dict(labels)["pid"] for labels in found["npumon_chip_process_memory_bytes"]) == [
        "1011", "1012", "1013"]
    assert found["npumon_chip_process_memory_other_bytes"][(("chip", "0"), ("npu", "0"))] == \
        sum(range(1, 12)) * 1024 * MIB
    _, found = scrape(busy_snapshot(), process_series_per_chip=0)
    assert "npumon_chip_process_memory_bytes" not in found
    assert found["npumon_chip_process_memory_other_bytes"][(("chip", "0"), ("npu", "0"))] == \
        sum(range(1, 15)) * 1024 * MIB


def test_a_process_of_unknown_size_is_listed_last_without_a_sample():
    _, found = scrape(busy_snapshot(processes_on_chip0=2))
    assert sorted(dict(labels)["pid"] for labels in found["npumon_chip_process_memory_bytes"]) == ["1000", "1001"]
    assert found["npumon_chip_process_memory_other_bytes"] == {(("chip", "0"), ("npu", "0")): 0.0}


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not on PATH (Debian: apt-get install prometheus)")
def test_process_families_pass_promtool():
    text, _ = scrape(busy_snapshot())
    result = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    assert "# HELP npumon_chip_process_memory_bytes Chip memory a process holds" in text


def test_config_key_is_read_and_checked():
    assert parse_config("").exporter.process_series_per_chip == 10
    assert parse_config("exporter:\n  process_series_per_chip: 3\n").exporter.process_series_per_chip == 3
    with pytest.raises(ConfigError) as info:
        parse_config("exporter:\n  process_series_per_chip: -1\n", "npumon.yaml")
    assert str(info.value) == "npumon.yaml:2: exporter.process_series_per_chip: must be 0..1000 (series per chip)"


def test_check_table_lists_every_process_largest_first():
    lines = render_table(busy_snapshot(processes_on_chip0=2), []).splitlines()
    start = lines.index("PROCESSES (3)")
    assert [line.split() for line in lines[start + 1:start + 5]] == [
        ["NPU", "CHIP", "PID", "NAME", "MEMORY"],
        ["0", "0", "1001", "worker-1", "2.0", "GiB"],
        ["0", "0", "1000", "worker-0", "1.0", "GiB"],
        ["0", "0", "999", "-", "-"],
    ]
    assert lines[start + 5] == ""
    idle = busy_snapshot(processes_on_chip0=0)
    idle.chips[0].processes = []
    assert "PROCESSES: none" in render_table(idle, []).splitlines()
