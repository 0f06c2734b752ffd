"""A quick `npumon check` through DCMI on the simulated 16-chip A3, with npu-smi and the simulated libdcmi.so at
hardware speed (npu-smi's latency model; 17.5 ms per DCMI call, dcmi_init 1.5 s): it must fit the default
--timeout 9 (inside NRPE's 10 s) and find what a pass through npu-smi finds. Its DCMI sweep asks health, error
codes and ECC only (read.QUICK_METRICS): a first full sweep (about 320 calls, 5.6 s) does not fit beside the main
table."""

import json
import os
import subprocess
import sys
import time

import pytest

from npumon.sim.latency import LATENCY_SCALE_ENV

# slow: a promise in wall time (the default --timeout within NRPE's 10 s) at hardware speed, around a process
# start; a loaded machine, or the default suite's two xdist workers beside it, breaks it (11.1 s under a load of 10).
pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.realistic_latency, pytest.mark.slow]


def _check(tmp_path, backend):
    config = tmp_path / "{}.yaml".format(backend)
    config.write_text("collect: {{backend: {}}}\n".format(backend))
    env = dict(os.environ, **{LATENCY_SCALE_ENV: "1"})
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "check", "--simulate", "health-critical",
                           "--sim-product", "atlas-a3", "--config", str(config), "--json"],
                          capture_output=True, text=True, env=env, timeout=60)
    return proc, json.loads(proc.stdout), time.monotonic() - started


def test_a_quick_check_through_dcmi_on_the_a3_fits_the_default_timeout(tmp_path, fake_dcmi_library, record_property):
    proc, document, took = _check(tmp_path, "dcmi")
    record_property("check_wall_seconds", round(took, 2))
    assert document.get("error") is None, document.get("error")
    assert proc.returncode == 2 and document["status"] == "critical"  # device 2's Critical health, as on npu-smi
    sources = document["sources"]
    assert sources["dcmi"]["ok"] and sources["dcmi"]["backend"] == "dcmi"
    assert sources["npu-smi"]["backend"] == "dcmi"
    # DCMI read the quick tiers: npu-smi asked neither -t health nor -t ecc
    assert "npu-smi:health" not in sources and "npu-smi:ecc" not in sources
    critical = [chip for chip in document["chips"] if chip["health"] == "Critical"]
    assert [chip["error_codes"] for chip in critical] == [["80CB8009"]]
    assert took < 10.0  # the default --timeout 9 plus the interpreter's start
