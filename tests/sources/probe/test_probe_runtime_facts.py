"""The ACL runtime's own view of each chip, asked in the probe child (npumon/sources/probe/runtime_facts.py):
each fact carries its source call and status, calls an older pyACL lacks are "unsupported" (never an error),
the parent keeps only well-formed facts, and the pure judgements behind the runtime-* rules."""

import os
import sys
import types

import pytest

from npumon.model import ChipSample, HostSample, ProbeSample, Snapshot
from npumon.sim.pyacl import SimulatedAcl
from npumon.sources.probe import runtime_view
from npumon.sources.probe.child import parse_arguments, probe
from npumon.sources.probe.config import ProbeConfig
from npumon.sources.probe.launch import child_command
from npumon.sources.probe.outcome import read_outcomes, runtime_entries
from npumon.sources.probe.runtime_facts import FACT_NAMES
from npumon.sources.probe.stages import Stages
from npumon.sources.runner import CommandRunner
from npumon.sim import prepare_simulation

NEWER_FACTS = ("runtime_version", "driver_version", "cube_ratio", "vector_ratio", "aicpu_ratio", "memory_ratio",
               "aicpu_count")


class _Quiet:
    def write(self, text):
        pass

    def flush(self):
        pass


def module_of(runtime, names=("init", "finalize", "get_soc_name", "get_version", "get_version_str",
                              "get_device_capability", "create_data_buffer", "destroy_data_buffer")):
    """An `acl` module exposing `names` of a simulated runtime (only those its pyACL has)."""
    present = {name: getattr(runtime, name) for name in names if runtime.has(name)}
    return types.SimpleNamespace(rt=runtime.rt, mdl=runtime.mdl, util=runtime.util, **present)


def probe_with(monkeypatch, runtime, module=None, facts=True):
    monkeypatch.setitem(sys.modules, "acl", module or module_of(runtime))
    args = ["--device", "2", "--copy-bytes", "1024"] + (["--runtime-facts"] if facts else [])
    return probe(parse_arguments(args), Stages(_Quiet()))


def simulated(**options):
    return SimulatedAcl(8, "Ascend910B3", lambda device: (3 << 30, 64 << 30), lambda device: {},
                        versions={"driver": "25.5.1", "runtime": "8.1.RC1"},
                        utilization_of=lambda device: {"cube": 50, "vector": 35, "aicpu": 3, "memory": 88}, **options)


def test_a_newer_pyacl_answers_every_fact_with_its_source(monkeypatch):
    runtime = simulated()
    report = probe_with(monkeypatch, runtime)
    assert report["state"] == "ok", report
    facts = report["runtime"]
    assert set(facts) == set(FACT_NAMES)
    assert {name for name, entry in facts.items() if entry["status"] != "ok"} == set()
    assert facts["device_count"] == {"value": 8, "source": "acl.rt.get_device_count", "status": "ok"}
    assert facts["soc_name"]["value"] == "Ascend910B3"
    assert facts["driver_version"] == {"value": "25.5.1", "source": 'acl.get_version_str("driver")', "status": "ok"}
    assert (facts["hbm_free_bytes"]["value"], facts["hbm_total_bytes"]["value"]) == (3 << 30, 64 << 30)
    assert [facts[name]["value"] for name in ("cube_ratio", "vector_ratio", "aicpu_ratio", "memory_ratio")] == [
        0.5, 0.35, 0.03, 0.88]
    assert facts["aicore_count"]["source"] == "acl.rt.get_device_info"
    assert runtime.leaks() == []


def test_an_older_pyacl_makes_the_newer_facts_unsupported_and_nothing_an_error(monkeypatch):
    runtime = simulated(older_pyacl=True)
    report = probe_with(monkeypatch, runtime)
    assert report["state"] == "ok" and report["failed_stage"] is None, report
    statuses = {name: entry["status"] for name, entry in report["runtime"].items()}
    assert {name for name, status in statuses.items() if status == "unsupported"} == set(NEWER_FACTS)
    assert "error" not in statuses.values()
    # the core counts fall back to the older acl.get_device_capability
    assert report["runtime"]["aicore_count"] == {"value": 20, "source": "acl.get_device_capability", "status": "ok"}
    assert not any(call in runtime.calls for call in ("rt.get_device_utilization_rate", "rt.get_device_info"))


def test_a_call_that_raises_or_returns_an_error_costs_one_fact_never_the_probe(monkeypatch):
    runtime = simulated()
    module = module_of(runtime)

    def broken(device):
        raise TypeError("get_device_utilization_rate() takes no arguments")

    module.rt = types.SimpleNamespace(**dict(vars(runtime.rt), get_device_utilization_rate=broken,
                                             get_device_count=lambda: (0, 507899)))
    report = probe_with(monkeypatch, runtime, module)
    assert report["state"] == "ok", report
    facts = report["runtime"]
    assert facts["cube_ratio"]["status"] == "error" and "TypeError" in facts["cube_ratio"]["error"]
    assert facts["device_count"] == {"value": None, "source": "acl.rt.get_device_count", "status": "error",
                                     "error": "returned 507899"}
    assert facts["soc_name"]["status"] == "ok"
    assert runtime.leaks() == []


def test_without_the_flag_the_child_asks_nothing_more(monkeypatch):
    runtime = simulated()
    report = probe_with(monkeypatch, runtime, facts=False)
    assert report["state"] == "ok" and "runtime" not in report
    assert "rt.get_device_count" not in runtime.calls


def test_facts_learnt_before_a_failing_stage_are_kept(monkeypatch):
    runtime = SimulatedAcl(8, "Ascend910B3", lambda device: (1, 2), lambda device: {
        "fail": "rt.set_device", "error_code": 507033}, versions={"driver": "25.5.1"})
    report = probe_with(monkeypatch, runtime)
    assert (report["state"], report["failed_stage"], report["error_code"]) == ("failed", "set_device", 507033)
    assert report["runtime"]["device_count"]["value"] == 8 and "hbm_free_bytes" not in report["runtime"]


def test_the_parent_keeps_only_known_well_formed_facts():
    entries = runtime_entries({
        "device_count": {"value": 8, "source": "acl.rt.get_device_count", "status": "ok"},
        "soc_name": {"value": ["x"], "source": "acl.get_soc_name", "status": "ok"},  # not a scalar
        "cube_ratio": {"value": 0.5, "source": "acl.rt.get_device_utilization_rate", "status": "maybe"},
        "vector_ratio": {"value": 0.2, "source": "acl.rt.get_device_utilization_rate", "status": "unsupported"},
        "invented": {"value": 1, "source": "acl.x", "status": "ok"},
    })
    assert entries == {"device_count": {"value": 8, "source": "acl.rt.get_device_count", "status": "ok"},
                       "vector_ratio": {"value": None, "source": "acl.rt.get_device_utilization_rate",
                                        "status": "unsupported"}}
    assert runtime_entries("garbage") == {}


# -- a stand-in pyACL of an older CANN, through the real child process ---------------------------------------

OLD_PYACL = '''"""An older pyACL: none of acl.get_version, get_version_str, get_device_capability,
acl.rt.get_device_utilization_rate, get_device_info or query_device_status."""
from types import SimpleNamespace
from npumon.sim.pyacl import SimulatedAcl

_runtime = SimulatedAcl(8, "Ascend310P3", lambda device: (1 << 30, 1 << 32), lambda device: {{}})
OLD_RT = {rt!r}
init, finalize, get_soc_name = _runtime.init, _runtime.finalize, _runtime.get_soc_name
create_data_buffer, destroy_data_buffer = _runtime.create_data_buffer, _runtime.destroy_data_buffer
rt = SimpleNamespace(**{{name: getattr(_runtime.rt, name) for name in OLD_RT}})
mdl, util = _runtime.mdl, _runtime.util
'''
OLD_RT = ("set_device", "reset_device", "create_context", "destroy_context", "create_stream", "destroy_stream",
          "get_mem_info", "malloc", "malloc_host", "free", "free_host", "memcpy", "synchronize_stream",
          "get_device_count")


def test_a_stand_in_older_pyacl_yields_unsupported_through_the_real_child(tmp_path):
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "acl.py").write_text(OLD_PYACL.format(rt=OLD_RT))
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("product: atlas-300i-duo\n")
    sim = prepare_simulation(str(tmp_path / "sim"), str(scenario))
    argv, env = child_command(ProbeConfig(acl_python_path=str(site), compute=False), "/nonexistent/Ascend",
                              os.environ, str(tmp_path / "state"))
    env.update(sim.env)
    result = CommandRunner(argv, 20.0, 1, env=env).run(["--device", "1"], priority=True)
    outcome = read_outcomes(result, [1], 20.0)[1]
    assert outcome.state == "ok", (outcome, result.stderr[-2000:])
    statuses = {name: entry["status"] for name, entry in outcome.runtime.items()}
    assert statuses.pop("device_count") == statuses.pop("soc_name") == statuses.pop("hbm_free_bytes") == "ok"
    statuses.pop("hbm_total_bytes")
    assert set(statuses.values()) == {"unsupported"}, statuses
    assert outcome.runtime["soc_name"]["value"] == "Ascend310P3"


# -- the judgements behind the rules ---------------------------------------------------------------------------


@pytest.mark.parametrize("chip, soc, expected", [
    ("910B3", "Ascend910B3", True), ("310P3", "Ascend310P3", True), ("Ascend910", "Ascend910_9382", True),
    ("910B3", "Ascend910A", False), ("310P3", "Ascend910B3", False), (None, "Ascend910B3", None), ("910B3", None, None),
])
def test_soc_names_match_as_the_products_spell_them(chip, soc, expected):
    assert runtime_view.soc_matches(chip, soc) is expected


def _chip(npu, values, **fields):
    record = runtime_view.runtime_record(0.0, npu, {name: {"value": value, "source": "acl.x", "status": "ok"}
                                                    for name, value in values.items()})
    return ChipSample(npu=npu, chip=0, extra={"runtime": record}, **fields)


def test_memory_shortfall_uses_hbm_or_else_ddr():
    hbm = runtime_view.chip_facts(_chip(0, {"hbm_free_bytes": 2 << 30, "hbm_total_bytes": 64 << 30},
                                        hbm_used_bytes=40 << 30, hbm_total_bytes=64 << 30), HostSample())
    assert hbm["runtime_hbm_shortfall_bytes"] == 22 << 30
    assert hbm["runtime_hbm_shortfall_ratio"] == pytest.approx(22 / 64)
    ddr = runtime_view.chip_facts(_chip(0, {"hbm_free_bytes": 20 << 30, "hbm_total_bytes": 24 << 30},
                                        memory_used_bytes=4 << 30, memory_total_bytes=24 << 30), HostSample())
    assert ddr["runtime_hbm_shortfall_ratio"] == 0
    blank = runtime_view.chip_facts(ChipSample(npu=0, chip=0), HostSample())
    assert blank["runtime_hbm_shortfall_ratio"] is None and blank["runtime_soc_matches"] is None


def test_driver_mismatch_from_the_reported_version_or_a_refused_device():
    host = HostSample(driver_version="25.5.1", cann_version="8.1.RC1")
    same = Snapshot(0.0, host, [_chip(0, {"driver_version": "25.5.1", "device_count": 8})], {})
    assert runtime_view.driver_mismatch(same)[0] is False
    other = Snapshot(0.0, host, [_chip(0, {"driver_version": "24.1.rc1"})], {})
    mismatch, reason = runtime_view.driver_mismatch(other)
    assert mismatch is True and "driver 24.1.rc1 but driver/version.info says 25.5.1" in reason
    refused = ChipSample(npu=1, chip=0, probe=ProbeSample(state="failed", time=0.0, failed_stage="set_device",
                                                          error_code=507033))
    mismatch, reason = runtime_view.driver_mismatch(Snapshot(0.0, host, [refused], {}))
    assert mismatch is True and "507033 (ACL_ERROR_RT_DEV_SETUP_ERROR) on npu1/chip0" in reason
    assert "CANN 8.1.RC1 and driver 25.5.1" in reason
    assert runtime_view.driver_mismatch(Snapshot(0.0, host, [ChipSample(npu=0, chip=0)], {}))[0] is None


def test_the_host_counts_the_fewest_devices_any_probe_saw():
    chips = [_chip(0, {"device_count": 8}), _chip(1, {"device_count": 6}), ChipSample(npu=2, chip=0)]
    facts = runtime_view.host_facts(Snapshot(0.0, HostSample(), chips, {}))
    assert (facts["runtime_device_count"], facts["runtime_missing_device_count"]) == (6, 0)
    facts = runtime_view.host_facts(Snapshot(0.0, HostSample(), chips * 3, {}))
    assert facts["runtime_missing_device_count"] == 3
