"""The source contract: every listed source satisfies it; a new source is one module plus one line in the list
(the worked example of docs/development.md, example_source.py beside this file, registered through the same list); and no Snapshot
part is changed after it is published."""

import dataclasses
import json
import os
import threading
import time

import pytest
from prometheus_client import generate_latest

import example_source
from npumon.cli.main import main as npumon_main
from npumon.settings import parse_config
from npumon.settings import SECTIONS, Config
from npumon.model import ChipSample, HostSample, SourceStatus
from npumon.outputs.exporter import ExporterView, build_registry
from npumon.outputs.report import status_document
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules
from npumon.sim.queue_server import QueueServer
from npumon.sim.simulation import prepare_simulation
from npumon.sim.target import simulated_target
from npumon.sources import registry
from npumon.sources.base import Outcome, Parts, PollRecorder, Source, SourceContext, SourceSpec, Tier
from npumon.sources.collection import SourceSet
from npumon.sources.runner import CommandRunner
from npumon.sources.target import Target

EVERYTHING_ON = """\
serving: {enabled: true, url: "http://127.0.0.1:1/metrics", timeout_seconds: 0.5}
probe: {enabled: true, timeout_seconds: 2, round_timeout_seconds: 3, sync_timeout_ms: 1000}
control: {ambient: {sensor: hwmon, hwmon_name: nothing-here}}
faults: {kmsg: true}
collect: {backend: dcmi}
npu_smi_timeout_seconds: 2
kubernetes: {enabled: true, socket: /nonexistent/kubelet.sock, timeout_seconds: 0.5}
"""


def built_sources(tmp_path, text=EVERYTHING_ON):
    config = parse_config(text)
    target = Target([str(tmp_path / "no-npu-smi")], None, str(tmp_path))
    runner = CommandRunner(target.npu_smi_argv, 2.0)
    return [(spec, spec.build(SourceContext(config, target, runner))) for spec in registry.SOURCES]


def test_every_listed_source_satisfies_the_contract(tmp_path):
    names = [spec.name for spec in registry.SOURCES]
    assert len(set(names)) == len(names)
    tiers = []
    for spec, source in built_sources(tmp_path):
        assert source is not None, spec.name  # everything is on in this config
        assert isinstance(source, Source) and source.name == spec.name
        own = source.tiers()
        assert own and own[0].name == spec.name, "a source's first tier carries its name"
        tiers.extend(own)
        for tier in own:  # on a host without npu-smi, hardware or endpoints: no source raises
            retry = source.poll(tier.name, [])
            assert retry is None or retry > 0
        statuses = source.statuses(time.time())
        assert set(statuses) <= {tier.name for tier in own}
        # one place times and records every poll: the source's PollRecorder
        assert isinstance(getattr(source, "recorder", None), PollRecorder), spec.name
        assert all(status.duration_seconds is not None for status in statuses.values()), (spec.name, statuses)
        before = Parts(time=time.time(), host=HostSample(hostname="h"))
        after = source.contribute(before, before.time)
        assert isinstance(after, Parts) and before.host == HostSample(hostname="h")
        source.close()
    assert len({tier.name for tier in tiers}) == len(tiers)
    assert [tier.name for tier in tiers if tier.primary] == ["npu-smi"]  # exactly one primary tier


def test_every_declaration_is_well_formed():
    keys = [section.key for section in SECTIONS]
    assert len(set(keys)) == len(keys) and set(keys) <= {field.name for field in dataclasses.fields(Config)}
    for section in SECTIONS:  # the defaults of every section pass its own checks
        assert section.problems(getattr(Config(), section.key), Config()) == [], section.key
    families = [metric.name for spec in registry.SOURCES for metric in spec.metrics]
    assert len(set(families)) == len(families) and all(name.startswith("npumon_") for name in families)
    for spec in registry.SOURCES:
        assert (spec.export is None) == (not spec.metrics), spec.name


def test_a_source_that_is_off_is_not_built(tmp_path):
    off = ("serving: {enabled: false}\nprobe: {enabled: false}\npoll: {host_seconds: 0}\nnetwork: {enabled: false}\n"
           "processes: {interval_seconds: 0}\n")
    assert [spec.name for spec, source in built_sources(tmp_path, off) if source is not None] == ["npu-smi"]


# -- the worked example: one module plus one line in the list --------------------------------------------------


@pytest.fixture
def with_example(monkeypatch):
    monkeypatch.setattr(registry, "SOURCES", registry.SOURCES + (example_source.SPEC,))


@pytest.fixture
def reset_host(tmp_path):
    return prepare_simulation(str(tmp_path / "sim"), "healthy", time_scale=0)


def write_resets(sim, text):
    path = os.path.join(sim.root, example_source.LOG_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def test_the_example_source_shows_in_check_json_metrics_and_a_rule(tmp_path, with_example, reset_host):
    sim = reset_host
    write_resets(sim, "0 0 5\n1 0 1\n")
    rule_file = tmp_path / "resets.yaml"
    rule_file.write_text(example_source.RULE)
    config = parse_config("probe: {enabled: false}\nrule_files: [%s]\n" % rule_file)
    collection = SourceSet(config, simulated_target(sim))
    try:
        snapshot = collection.collect_once()
    finally:
        collection.close()
    rules, params = load_rules(config.rule_files)
    findings = RuleEngine(rules, params).evaluate(snapshot, snapshot.time)
    document = status_document(snapshot, findings)
    assert document["sources"]["chip-resets"]["ok"] is True
    assert [chip.get("reset_count") for chip in document["chips"][:3]] == [5, 1, None]
    assert [(f.rule, f.subject, f.summary) for f in findings if f.rule == "chip-reset-often"] == [
        ("chip-reset-often", "npu0/chip0", "reset 5 times")]
    text = generate_latest(build_registry(lambda: ExporterView(snapshot, findings))).decode()
    assert 'npumon_chip_resets{chip="0",npu="0"} 5.0' in text
    assert 'npumon_source_up{source="chip-resets"} 1.0' in text


def test_the_example_source_through_the_command_line(tmp_path, with_example, capsys, monkeypatch):
    # `npumon check --simulate` prepares its own simulated host: the reset log goes into its host tree.
    real_prepare = prepare_simulation

    def prepare_with_log(state_dir, *args, **kwargs):
        sim = real_prepare(state_dir, *args, **kwargs)
        write_resets(sim, "2 0 9\nnot a line\n")
        return sim

    monkeypatch.setattr("npumon.sim.simulation.prepare_simulation", prepare_with_log)
    code = npumon_main(["check", "--simulate", "--no-probe", "--json"])
    document = json.loads(capsys.readouterr().out)
    status = document["sources"]["chip-resets"]
    assert not status["ok"] and status["error"].endswith("npu-resets:2: expected 'NPU CHIP COUNT', got 'not a line'")
    assert code == 1  # the source is down: source-down warns, exactly as for a built-in source


# -- published snapshots are never changed --------------------------------------------------------------------


def fingerprint(snapshot):
    return json.dumps(dataclasses.asdict(snapshot), sort_keys=True, default=repr)


def test_published_snapshots_stay_as_they_were_while_sources_keep_polling(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "cpu-bottleneck")
    config = parse_config("probe: {enabled: false}\nserving: {interval_seconds: 1}\n")
    with QueueServer(str(tmp_path / "sim")) as queue:
        target = simulated_target(sim, serving_url=queue.url)
        collection = SourceSet(config, target)
        try:
            published = [collection.collect_once()]
            prints = [fingerprint(published[0])]
            for _ in range(3):
                threads = [threading.Thread(target=collection.poll, args=(tier.name,)) for tier in collection.tiers()
                           if tier.interval > 0]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                published.append(collection.snapshot())
                prints.append(fingerprint(published[-1]))
        finally:
            collection.close()
    assert published[0].host.serving_queue_depth is not None and published[0].chips
    assert [fingerprint(snapshot) for snapshot in published] == prints
    assert published[0].host is not published[1].host  # every snapshot has parts of its own


def test_a_stale_serving_depth_leaves_the_snapshot_although_the_host_facts_are_still_fresh(tmp_path):
    """The serving source once wrote into the HostSample that the host source shares between snapshots, so the
    old depth stayed until the next host poll (forever with poll.host_seconds: 0)."""
    sim = prepare_simulation(str(tmp_path / "sim"), "cpu-bottleneck", time_scale=0)
    config = parse_config("probe: {enabled: false}\nmax_age_seconds: 60\n"
                          "poll: {host_seconds: 300}\nserving: {interval_seconds: 15}\n")
    clock = [1000.0]
    with QueueServer(str(tmp_path / "sim")) as queue:
        target = simulated_target(sim, serving_url=queue.url)
        collection = SourceSet(config, target, clock=lambda: clock[0])
        try:
            collection.poll("npu-smi")
            collection.poll("host")
            collection.poll("serving-queue")
            assert collection.snapshot().host.serving_queue_depth > 0
            clock[0] += 100  # the depth (fresh for 60 s) is stale; the host facts (fresh for 600 s) are not
            later = collection.snapshot()
        finally:
            collection.close()
    assert later.host.cpu_count is not None and later.sources["host"].ok
    assert later.host.serving_queue_depth is None
    assert not later.sources["serving-queue"].ok and later.sources["serving-queue"].error.startswith("stale")


# -- the chips a poll is given ----------------------------------------------------------------------------------


class _Counting:
    """A source with one tier that lists `chips` chips (its count goes up by one per poll) and records the chips
    each poll was given and how often its contribute() ran."""

    def __init__(self, name):
        self.name, self.listed, self.given, self.contributed = name, 1, [], 0

    def tiers(self):
        return [Tier(self.name, 5.0, primary=self.name == "table")]

    def poll(self, tier, chips):
        self.given.append(len(chips))
        if self.name == "table":
            self.listed += 1

    def statuses(self, now):
        return {self.name: SourceStatus(ok=True)}

    def contribute(self, parts, now):
        self.contributed += 1
        if self.name != "table":
            return parts
        return dataclasses.replace(parts, chips=tuple(ChipSample(npu=n, chip=0) for n in range(self.listed)))

    def close(self):
        pass


def test_polls_that_start_together_share_the_latest_snapshot_and_one_that_follows_a_poll_sees_its_chips(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy", time_scale=0)
    sources = {name: _Counting(name) for name in ("table", "other")}
    specs = [SourceSpec(name, lambda context, source=source: source, lists_chips=name == "table")
             for name, source in sources.items()]
    collection = SourceSet(parse_config(""), simulated_target(sim),
                           specs=specs)
    try:
        assert len(collection.snapshot().chips) == 1  # as the daemon's publish builds it
        collection.poll("other")  # nothing ended since: the published snapshot's chips, no new walk
        assert sources["table"].contributed == 1 and sources["other"].given == [1]
        collection.poll("table")  # ended since: the chips are made again
        assert sources["table"].contributed == 2 and sources["table"].given == [1]
        collection.poll("other")  # the table's poll ended: its second chip is there
        assert sources["table"].contributed == 3 and sources["other"].given == [1, 2]
        # only the source that lists the chips was asked: a poll does not walk every source
        assert sources["other"].contributed == 1
    finally:
        collection.close()


class _Flaky(_Counting):
    """A source whose one tier is up or down, and reads what value, after a poll as the test says; its status made
    by a PollRecorder, as every source's."""

    up, value, judged = True, 1, False

    def __init__(self, name):
        super().__init__(name)
        self.recorder = PollRecorder(name, lambda tier: 60.0)
        self.last_value = None

    def tiers(self):
        return [Tier(self.name, 5.0, judged=self.judged)]

    def poll(self, tier, chips):
        return self.recorder.execute(tier, self._read)

    def _read(self, started):
        if not self.up:
            return Outcome.failed("down")
        changed, self.last_value = self.value != self.last_value, self.value
        return Outcome(changed=changed)

    def statuses(self, now):
        return self.recorder.statuses(now)


def _flaky_collection(tmp_path, flaky):
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy", time_scale=0)
    return SourceSet(parse_config(""), simulated_target(sim), specs=[SourceSpec("flaky", lambda context: flaky)])


def test_a_poll_that_takes_a_tier_down_or_back_asks_for_a_judgement_once(tmp_path):
    flaky = _Flaky("flaky")
    collection = _flaky_collection(tmp_path, flaky)
    try:
        collection.poll("flaky")
        assert collection.wants_judgement("flaky") and not collection.wants_judgement("flaky")  # its first: up
        collection.poll("flaky")
        assert not collection.wants_judgement("flaky")  # up as before, and not a judged tier
        flaky.up = False
        collection.poll("flaky")
        assert collection.wants_judgement("flaky") and not collection.wants_judgement("flaky")  # once
        collection.poll("flaky")
        assert not collection.wants_judgement("flaky")  # still down: nothing new
        flaky.up = True
        collection.poll("flaky")
        assert collection.wants_judgement("flaky")  # back
    finally:
        collection.close()


def test_a_judged_tier_asks_for_a_judgement_only_when_it_read_something_new(tmp_path):
    flaky = _Flaky("flaky")
    flaky.judged = True
    collection = _flaky_collection(tmp_path, flaky)
    try:
        collection.poll("flaky")
        assert collection.wants_judgement("flaky")
        collection.poll("flaky")
        assert not collection.wants_judgement("flaky")  # the same answer again: the same findings
        flaky.value = 2
        collection.poll("flaky")
        assert collection.wants_judgement("flaky") and not collection.wants_judgement("flaky")
        flaky.value = 3
        collection.poll("flaky")
        collection.poll("flaky")  # two polls before the daemon asks: the first one's news is not lost
        assert collection.wants_judgement("flaky")
    finally:
        collection.close()
