"""What only DCMI reads is exported (sources/dcmi/metrics.py): a pass through the simulated libdcmi.so serves the
board ids, the AI Core count, the rated AI Core and HBM clocks and the ECC counters per bit, each family with
HELP, clean under `promtool check metrics`; the npu-smi backend serves no sample of the DCMI-only ones."""

import shutil
import subprocess
import tempfile

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from npumon.settings import parse_config
from npumon.outputs.exporter import ExporterView, build_registry
from npumon.sim.simulation import prepare_simulation
from npumon.sim.target import simulated_target, simulation_config
from npumon.sources.collection import SourceSet

pytestmark = pytest.mark.integration
DCMI_ONLY = ("npumon_chip_board_info", "npumon_chip_aicores", "npumon_chip_aicore_rated_frequency_hertz",
             "npumon_chip_hbm_frequency_hertz")


def _exposition(backend, library, product="atlas-800i-a2"):
    state_dir = tempfile.mkdtemp(prefix="npumon-dcmi-metrics-")
    sim = prepare_simulation(state_dir, scenario="ecc-rising", product=product, time_scale=0)
    config = parse_config("collect: {{backend: {}}}\ndcmi: {{library: {}}}\npoll: {{host_seconds: 0}}\n".format(
        backend, library))
    config = simulation_config(config, state_dir)
    target = simulated_target(sim)
    sources = SourceSet(config, target, skip=("probe", "hccn"))
    try:
        snapshot = sources.collect_once(full=True)
    finally:
        sources.close()
    return generate_latest(build_registry(lambda: ExporterView(snapshot=snapshot, findings=[]))).decode()


def _samples(text):
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_dcmi_only_values_have_families_and_npu_smi_serves_none_of_them(library):
    through_dcmi, through_npu_smi = _exposition("dcmi", library), _exposition("npu-smi", library)
    served = _samples(through_dcmi)
    chip0 = (("chip", "0"), ("npu", "0"))

    def value(name, *labels):
        return served[(name, tuple(sorted(chip0 + labels)))]

    assert value("npumon_chip_aicore_rated_frequency_hertz") == 1800e6  # the 910B3's rated clock
    assert value("npumon_chip_hbm_frequency_hertz") > 0 and value("npumon_chip_aicores") == 20
    board = [labels for (name, labels) in served if name == "npumon_chip_board_info" and ("npu", "0") in labels]
    assert dict(board[0])["pcie_vendor_id"] == "0x19e5" and dict(board[0])["board_id"]
    single = value("npumon_chip_ecc_aggregate_errors", ("bit", "single"), ("memory", "hbm"))
    assert single >= value("npumon_chip_ecc_errors", ("bit", "single"), ("memory", "hbm"))
    for name in DCMI_ONLY:
        assert "# HELP {} ".format(name) in through_dcmi
        assert not [key for key in _samples(through_npu_smi) if key[0] == name], name


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not on PATH (Debian: apt-get install prometheus)")
def test_promtool_finds_nothing_to_say_about_the_dcmi_families(library):
    text = _exposition("dcmi", library)
    result = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
