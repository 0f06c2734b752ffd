"""collect.backend: which backend reads what. With DCMI in use the npu-smi queries it covers are not asked; a
query comes back where DCMI lacks it (every chip refused one of its calls) and while the DCMI source is down."""

import os
import tempfile
import time

import pytest

from npumon.config.errors import ConfigError
from npumon.settings import parse_config
from npumon.sim.dcmi import build_fake_library, set_dcmi_faults
from npumon.sim.simulation import prepare_simulation
from npumon.sim.target import simulated_target, simulation_config
from npumon.sources.collection import SourceSet
from npumon.sources.dcmi import backend
from npumon.sources.target import Target
from paths import sticky_ancestor

pytestmark = pytest.mark.integration


def _sources(text, product="atlas-800i-a2"):
    state_dir = tempfile.mkdtemp(prefix="npumon-backend-")
    sim = prepare_simulation(state_dir, product=product, time_scale=0)
    config = simulation_config(parse_config(text + "poll: {host_seconds: 0}\n"), state_dir)
    return SourceSet(config, simulated_target(sim), skip=("probe",)), state_dir


def test_dcmi_stands_in_for_the_queries_it_reads_and_npu_smi_for_those_it_lacks(library):
    sources, _ = _sources("collect: {backend: dcmi}\n")
    try:
        first = sources.collect_once(full=True)
        assert first.sources["dcmi"].ok and first.sources["npu-smi"].backend == "dcmi"
        assert not {"npu-smi:health", "npu-smi:ecc", "npu-smi:power", "npu-smi:usages"} & set(first.sources)
        assert first.sources["npu-smi:board"].ok  # firmware and compatibility: no DCMI call
        # 910B's library refuses the DDR bandwidth rate (-8255): -t usages comes back for it
        second = sources.collect_once(full=True)
        assert second.sources["npu-smi:usages"].ok
        assert "npu-smi:health" not in second.sources
        chip = second.chip(0, 0)
        assert chip.aicube_ratio is not None and chip.vdie_id is not None
    finally:
        sources.close()


def test_while_dcmi_is_down_npu_smi_asks_again(library):
    sources, state_dir = _sources("collect: {backend: dcmi}\ndcmi: {timeout_seconds: 1}\n")
    try:
        sources.collect_once(full=False)
        set_dcmi_faults(state_dir, segfault=["*"])
        down = sources.collect_once(full=False)
        assert not down.sources["dcmi"].ok and "SIGSEGV" in down.sources["dcmi"].error
        after = sources.collect_once(full=False)
        assert after.sources["npu-smi:health"].ok and after.chip(0, 0).health == "OK"
    finally:
        sources.close()


def test_auto_on_a_simulated_host_keeps_npu_smi():
    sources, _ = _sources("")
    try:
        snapshot = sources.collect_once(full=False)
        assert "dcmi" not in snapshot.sources and snapshot.sources["npu-smi"].backend == "npu-smi"
    finally:
        sources.close()


def test_auto_falls_back_to_npu_smi_and_says_why(tmp_path):
    config = parse_config("dcmi: {library: %s}\n" % (tmp_path / "missing.so"))
    target = Target(["npu-smi"], None, "/")
    decision = backend.decide(config, target)
    assert decision.backend == "npu-smi"
    assert decision.reason == "auto: dcmi library {}: cannot be read: No such file or directory".format(
        tmp_path / "missing.so")


def test_auto_refuses_a_library_under_a_world_writable_directory(tmp_path, library):
    """/tmp (1777) is above it: refused on a real host, as npu-exporter would, and npu-smi is used."""
    if os.getuid() != 0:
        pytest.skip("needs root to own the library")
    os.chmod(str(tmp_path), 0o755)
    directory = tmp_path / "lib"
    directory.mkdir(mode=0o755)
    copy = directory / "libdcmi.so"
    copy.write_bytes(open(library, "rb").read())
    os.chmod(str(copy), 0o755)
    decision = backend.decide(parse_config("dcmi: {library: %s}\n" % copy), Target(["npu-smi"], None, "/"))
    assert decision.backend == "npu-smi" and "(directory {}) (mode 1777)".format(sticky_ancestor(copy)) in decision.reason


def test_auto_takes_dcmi_where_the_library_loads_and_initialises(tmp_path, monkeypatch):
    """The simulator's library in its default cache (~/.cache, root's and not writable by others): on a real
    target auto builds both sources at once without opening the library (only its path is checked); npu-smi
    reads the chips until the DCMI source's first good sweep, then the queries DCMI covers move to it."""
    try:
        path = build_fake_library()
        from npumon.sources.dcmi.library import check_path
        check_path(path)
    except Exception as exc:  # noqa: BLE001 - no compiler, or a home directory others may write
        pytest.skip(str(exc))
    sim = prepare_simulation(str(tmp_path / "sim"), time_scale=0)
    monkeypatch.setenv("NPUMON_SIM_STATE", sim.env["NPUMON_SIM_STATE"])
    decision = backend.decide(parse_config("dcmi: {library: %s}\n" % path), Target(["npu-smi"], None, "/"))
    assert decision.backend == "dcmi" and decision.auto and decision.worker is None
    assert decision.reason == "auto: {} passed the path checks; npu-smi until it initialises".format(path)
    assert not decision.covers("health")
    assert decision.status_backend() == ("npu-smi", "auto: {} not initialised yet".format(path))


def test_auto_starts_on_npu_smi_past_a_hanging_library_and_switches_when_dcmi_comes_up(library):
    """dcmi_init hangs (a driver still starting): building the sources does not wait for it, a pass bounded by
    its time (a check) ends in time on npu-smi with the reason named, and once the library answers the DCMI
    source takes over the queries it covers."""
    state_dir = tempfile.mkdtemp(prefix="npumon-auto-")
    sim = prepare_simulation(state_dir, product="atlas-800i-a2", time_scale=0)
    set_dcmi_faults(state_dir, hang=["dcmi_init"], hang_seconds=600)
    target = simulated_target(sim)
    started = time.monotonic()
    config = parse_config("dcmi: {library: %s, open_timeout_seconds: 60}\npoll: {host_seconds: 0}\n" % library)
    sources = SourceSet(simulation_config(config, state_dir), target, skip=("probe",))
    try:
        assert time.monotonic() - started < 5.0  # no open at build time
        first = sources.collect_once(full=False, within=3.0)
        assert time.monotonic() - started < 15.0  # bounded by the pass, not by open_timeout_seconds
        table = first.sources["npu-smi"]
        assert table.backend == "npu-smi" and "dcmi" not in first.sources
        assert table.fallback_reason.startswith("auto: DCMI is down: worker: no answer within ")
        assert first.sources["npu-smi:health"].ok and first.chip(0, 0).health == "OK"  # npu-smi read it
        assert table.to_json()["fallback_reason"] == table.fallback_reason
        set_dcmi_faults(state_dir)
        dcmi = next(source for source in sources.sources if source.name == "dcmi")
        dcmi.worker._not_before = 0.0  # its restart backoff is the worker tests' business
        sources.npu_smi.not_after = None
        sources.poll("dcmi")
        after = sources.snapshot()
        assert after.sources["npu-smi"].backend == "dcmi" and after.sources["npu-smi"].fallback_reason is None
        assert after.sources["dcmi"].ok and dcmi.decision.covers("health")
    finally:
        sources.close()


@pytest.mark.parametrize("text, message", [
    ("collect: {backend: nvml}\n", "collect.backend: must be one of auto, dcmi, npu-smi (got 'nvml')"),
    ("dcmi: {library: lib/libdcmi.so}\n", "dcmi.library: must be an absolute path"),
    ("dcmi: {timeout_seconds: 0}\n", "dcmi.timeout_seconds: must be greater than 0"),
])
def test_config_mistakes_are_one_line(text, message):
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_check_json_names_the_backend_in_use(tmp_path, library, cli):
    import json

    config = tmp_path / "npumon.yaml"
    config.write_text("collect: {backend: dcmi}\nstate_dir: %s\n" % (tmp_path / "state"))
    runs = {}
    for name, args in (("dcmi", ["--config", str(config)]), ("npu-smi", [])):
        proc = cli("check", "--simulate", "--json", *args)  # main() in-process
        runs[name] = json.loads(proc.stdout)["sources"]
    assert runs["dcmi"]["npu-smi"]["backend"] == "dcmi" and runs["dcmi"]["dcmi"]["ok"]
    assert runs["dcmi"]["dcmi"]["backend"] == "dcmi"
    assert runs["npu-smi"]["npu-smi"]["backend"] == "npu-smi" and "dcmi" not in runs["npu-smi"]
    assert runs["npu-smi"]["npu-smi"]["fallback_reason"] == (
        "auto: a simulated host uses npu-smi unless collect.backend is dcmi or dcmi.library names a library")
    assert "fallback_reason" not in runs["dcmi"]["npu-smi"]
