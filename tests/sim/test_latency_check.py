"""`npumon check --simulate` end to end with the simulator at hardware speed (NPUMON_SIM_LATENCY_SCALE=1):
it must report what it reports with latency off. Each test runs the real executable per npu-smi call."""

import os
import subprocess
import sys
import time

import pytest

from npumon.sim.latency import LATENCY_SCALE_ENV

# slow: promises in wall time (NRPE's 10 s) at hardware speed, around two process starts; a loaded machine, or
# the default suite's two xdist workers beside them, breaks them (10.03 s against 10 s under a load of 10).
pytestmark = [pytest.mark.e2e, pytest.mark.realistic_latency, pytest.mark.slow]


def check(product, latency_scale, *extra):
    env = dict(os.environ, **{LATENCY_SCALE_ENV: latency_scale})
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "check", "--simulate", "--sim-product", product]
                          + list(extra), capture_output=True, text=True, env=env, timeout=180)
    return proc, time.monotonic() - started


def report(proc):
    """The exit code, the status before the perfdata, and the chip rows' count: what must not change."""
    lines = proc.stdout.splitlines()
    chip_rows = [line for line in lines if line[:1].isdigit()]
    return proc.returncode, lines[0].split(" | ")[0] if lines else proc.stderr, len(chip_rows)


def test_check_on_the_single_chip_board_at_hardware_speed_reports_what_it_reports_without(record_property):
    fast, _ = check("atlas-200i-a2", "0")
    real, took = check("atlas-200i-a2", "1")
    record_property("check_wall_seconds", round(took, 2))
    assert report(fast) == (0, "NPU OK - 1 chip OK", 1)
    assert report(real) == report(fast), real.stdout[-2000:]
    assert took < 10.0  # a Nagios plugin's default timeout (NRPE: 10 s)


def test_check_on_the_default_product_at_hardware_speed_reports_what_it_reports_without(record_property):
    fast, _ = check("atlas-800i-a2", "0")
    real, took = check("atlas-800i-a2", "1")
    record_property("check_wall_seconds", round(took, 2))
    assert report(fast) == (0, "NPU OK - 8 chips OK", 8)
    assert report(real) == report(fast), real.stdout[-2000:]
    assert took < 10.0  # NRPE's default timeout


def test_check_on_the_16_chip_a3_at_hardware_speed_reports_what_it_reports_without(record_property):
    # 2 s a call: the quick pass is the table, then -t ecc of every card at once (check_max_concurrent 8) and
    # -t health of chips not OK: about 5 s of the default --timeout 9 (benchmarks/results/check-a3-quick.md).
    fast, _ = check("atlas-a3", "0")
    real, took = check("atlas-a3", "1")  # the default --timeout 9, as NRPE runs it
    record_property("check_wall_seconds", round(took, 2))
    assert report(fast) == (0, "NPU OK - 16 chips OK", 16)
    assert report(real) == report(fast), real.stdout[-2000:]
