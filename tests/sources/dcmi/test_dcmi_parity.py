"""Parity: for every simulated product and scenario (NOT_COMPARED says which not, and why), one full pass through
DCMI (the simulated libdcmi.so) yields the same chips as one through simulated npu-smi on every field both backends
fill, and the built-in rules find the same things. The fields only one backend fills are listed here, and in
docs/dcmi.md's backend table; a field that moves from one list to another must be seen here first."""

import shutil
import tempfile

import pytest

from npumon.cli.check import load_rule_engine
from npumon.settings import parse_config
from npumon.model import chip_json
from npumon.sim.dcmi import DCMI_PRODUCTS
from npumon.sim.simulation import list_scenarios, prepare_simulation
from npumon.sim.target import simulated_target, simulation_config
from npumon.sources.collection import SourceSet
from scenario_matrix import each_scenario_once

pytestmark = pytest.mark.integration

# Every scenario but those whose behaviour has no DCMI form by design: `garbage` garbles npu-smi's text (DCMI answers
# binary structs), `hang` wedges both backends (tests/sources/dcmi/test_dcmi_worker.py and the daemon tests), `slow`
# only slows npu-smi down, `unsupported` refuses calls on each backend in its own way (test_dcmi_backend.py), and
# `card-drop` takes a card out of npu-smi's answers only (the simulated library does not model a dropped card).
NOT_COMPARED = frozenset(("garbage", "hang", "slow", "unsupported", "card-drop"))
SCENARIOS = tuple(name for name in list_scenarios() if name not in NOT_COMPARED)
# Time-dependent or not the backends' business (the probe, host facts; npu-smi's identity sweep still to come).
IGNORED = frozenset(("probe", "pcie", "numa_node", "processes", "process_activity", "identity_pending"))
# What npu-smi prints and DCMI has no call for on these products (or one the simulated library refuses, -8255,
# as the real one does): these come from npu-smi only.
NPU_SMI_ONLY = frozenset(("firmware_version", "driver_version", "ddr_bandwidth_ratio"))
# The V2 API (the 950) has no call for an error code's text (dcmi_get_device_errorcode_string is V1 only), nor
# dcmi_get_device_info (the 950's SIO errors come from npu-smi -t sio-info).
NPU_SMI_ONLY_V2 = NPU_SMI_ONLY | {"error_information", "sio"}
# What DCMI reads that npu-smi's outputs do not print (ids from DCMI's own calls; the 310 family's ECC pages).
DCMI_ONLY = frozenset(("aicore_count", "npu_name", "hbm_freq_mhz", "aicore_rated_freq_mhz", "board_id", "slot_id",
                       "pcie_vendor_id", "pcie_device_id", "pcie_subvendor_id", "pcie_subdevice_id",
                       "ecc_counters", "ecc_isolated_pages", "card_power_watts", "ecc",
                       "ub", "ub_bandwidth"))  # the 950's UB ports: npu-smi has no query for them


def _snapshot(product: str, scenario: str, backend: str, library: str):
    state_dir = tempfile.mkdtemp(prefix="npumon-parity-")
    sim = prepare_simulation(state_dir, scenario=scenario, product=product, time_scale=0)
    config = parse_config("collect: {{backend: {}}}\ndcmi: {{library: {}}}\npoll: {{common_seconds: 60, "
                          "memory_seconds: 60, volt_seconds: 60, host_seconds: 0}}\n".format(backend, library))
    config = simulation_config(config, state_dir)
    target = simulated_target(sim)
    # the chip backends only: not the network, nor the kernel log (its lines arrive with scenario time, so two
    # passes one after the other count different numbers of them), nor the processes' CPU time (wall time)
    sources = SourceSet(config, target, skip=("probe", "hccn", "kmsg", "processes"))
    try:
        return sources.collect_once(full=True), config
    finally:
        sources.close()
        shutil.rmtree(state_dir, ignore_errors=True)


def _differences(left, right):
    diffs, only_left, only_right = {}, set(), set()
    for key in set(left) | set(right):
        if key in IGNORED:
            continue
        a, b = left.get(key), right.get(key)
        if a in (None, []) and b in (None, []):
            continue
        if a in (None, []):
            only_right.add(key)
        elif b in (None, []):
            only_left.add(key)
        elif isinstance(a, dict) and isinstance(b, dict):
            inner, _, _ = _differences(a, b)  # per memory and counter: where both print one
            if inner:
                diffs[key] = inner
        elif a != b:
            diffs[key] = (a, b)
    return diffs, only_left, only_right


# The default run compares every scenario once, on the A3 (16 chips over the V1 API, with HCCS and SIO) or the
# 950 (the V2 API) in turn, and healthy on both; the slow suite (.ci/run runs it on every change) repeats every
# scenario on every product. The full matrix took a ninth of the default suite's CPU.
DEFAULT_RUN_PRODUCTS = ("atlas-a3", "atlas-350")


@pytest.mark.parametrize("scenario, product", each_scenario_once(SCENARIOS, DCMI_PRODUCTS, DEFAULT_RUN_PRODUCTS))
def test_dcmi_and_npu_smi_agree(product, scenario, library):
    through_npu_smi, config = _snapshot(product, scenario, "npu-smi", library)
    through_dcmi, _ = _snapshot(product, scenario, "dcmi", library)
    assert through_dcmi.sources["dcmi"].ok, through_dcmi.sources["dcmi"].error
    assert through_dcmi.sources["npu-smi"].backend == "dcmi"
    assert through_npu_smi.sources["npu-smi"].backend == "npu-smi" and "dcmi" not in through_npu_smi.sources
    assert [chip.key for chip in through_dcmi.chips] == [chip.key for chip in through_npu_smi.chips]
    for smi, dcmi in zip(through_npu_smi.chips, through_dcmi.chips):
        diffs, only_smi, only_dcmi = _differences(chip_json(smi), chip_json(dcmi))
        assert diffs == {}, smi.key
        assert only_smi <= (NPU_SMI_ONLY_V2 if product == "atlas-350" else NPU_SMI_ONLY), smi.key
        # the identity fields come from npu-smi's identity tier too, which one pass reads only in part
        assert only_dcmi <= DCMI_ONLY | {"vdie_id", "model_name", "phy_id", "device_id", "serial_number"}, smi.key
    engine, _ = load_rule_engine(config, one_shot=True)
    # the 950's SIO comes from npu-smi alone, which one pass through DCMI does not ask before DCMI has found it
    # lacking (the daemon's npu-smi sio tier reads it from its next poll on): its findings are npu-smi's only
    npu_smi_only_rules = ("sio-",) if product == "atlas-350" else ()
    # the UB rules judge what DCMI alone reads
    one_backend_rules = npu_smi_only_rules + ("ub-",)
    findings = lambda snapshot: sorted((f.rule, f.subject, f.severity) for f in engine.evaluate(  # noqa: E731
        snapshot, now=snapshot.time) if not f.rule.startswith(one_backend_rules))
    assert findings(through_dcmi) == findings(through_npu_smi)
