"""npumon_source_call*: the one npu-smi runner's counts per source tier, as Prometheus counters and a histogram."""

import shutil
import subprocess
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from npumon.outputs.call_metrics import CallStatsCollector
from npumon.sources.runner import CommandResult, CommandRunner


def fake_npu_smi(argv, env, timeout_seconds):
    if "hang" in argv:
        time.sleep(timeout_seconds)
        return CommandResult(argv, None, "", "", timeout_seconds, timed_out=True)
    if "bad" in argv:
        return CommandResult(argv, 255, "", "Command or option is not found.", 0.05)
    return CommandResult(argv, 0, "ok\n", "", 0.3)


def exposition(runner):
    registry = CollectorRegistry()
    registry.register(CallStatsCollector(lambda: runner.stats))
    return generate_latest(registry).decode()


def test_calls_failures_timeouts_queue_and_durations_per_source():
    runner = CommandRunner(["npu-smi"], timeout_seconds=0.2, max_concurrent=1, spawn=fake_npu_smi)
    runner.run(["info"], label="npu-smi")
    runner.run(["info", "bad"], label="npu-smi:usages")
    busy = threading.Thread(target=runner.run, args=(["hang"],), kwargs={"label": "npu-smi:usages"})
    busy.start()
    time.sleep(0.05)
    runner.run(["info"], not_after=time.monotonic() + 0.01, label="npu-smi:usages")  # no slot in time
    busy.join()
    runner.stats.overran("npu-smi:usages")
    runner.run(["info"])  # no label: the fan driver's calls
    text = exposition(runner)
    assert 'npumon_source_calls_total{source="npu-smi:usages"} 2.0' in text
    assert 'npumon_source_call_failures_total{source="npu-smi:usages"} 2.0' in text
    assert 'npumon_source_call_timeouts_total{source="npu-smi:usages"} 1.0' in text
    assert 'npumon_source_calls_not_started_total{source="npu-smi:usages"} 1.0' in text
    assert 'npumon_source_overruns_total{source="npu-smi:usages"} 1.0' in text
    assert 'npumon_source_calls_total{source="other"} 1.0' in text
    assert 'npumon_source_call_duration_seconds_bucket{le="0.25",source="npu-smi"} 0.0' in text
    assert 'npumon_source_call_duration_seconds_bucket{le="0.5",source="npu-smi"} 1.0' in text
    assert 'npumon_source_call_duration_seconds_count{source="npu-smi"} 1.0' in text
    assert 'npumon_source_call_failures_total{source="npu-smi"} 0.0' in text


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian's prometheus)")
def test_the_families_pass_promtool():
    runner = CommandRunner(["npu-smi"], timeout_seconds=1, spawn=fake_npu_smi)
    runner.run(["info"], label="npu-smi")
    result = subprocess.run(["promtool", "check", "metrics"], input=exposition(runner), capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr
