"""Start-up reads and builds the rules once: the config's check of `thresholds:`, the daemon's engine and the
notifier (which needs each rule's `for`) share them, since each extra pass cost every start tens of ms of CPU."""

import pytest

import npumon.rules.loader as loader
import npumon.services.notify.service as notify_module
from npumon.daemon.daemon import Daemon
from npumon.settings import parse_config
from npumon.sim import prepare_simulation
from npumon.sim.target import simulated_target

CONFIG = """\
state_dir: {state}
thresholds: {{temperature_critical_celsius: 90}}
notify:
  receivers:
    - {{name: hook, type: webhook, url: 'http://127.0.0.1:9/'}}
"""


@pytest.fixture
def counted(monkeypatch):
    """Counts of rule file reads and of rules built, from an empty cache of the built-in file."""
    counts = {"files": [], "rules": 0}
    read, build = loader._read_rule_file, loader._build_rule

    def read_counted(path):
        counts["files"].append(path)
        return read(path)

    def build_counted(entry, params):
        counts["rules"] += 1
        return build(entry, params)

    monkeypatch.setattr(loader, "_read_rule_file", read_counted)
    monkeypatch.setattr(loader, "_build_rule", build_counted)
    loader._builtin_file.cache_clear()
    yield counts
    loader._builtin_file.cache_clear()  # nothing read through the counter stays cached for other tests


def test_a_daemon_start_reads_and_builds_the_rules_once(tmp_path, counted, running):
    config = parse_config(CONFIG.format(state=tmp_path / "state"), str(tmp_path / "npumon.yaml"))
    daemon = running(Daemon(config, simulated_target(prepare_simulation(str(tmp_path / "sim"), "healthy")),
                            listen="127.0.0.1:0"))
    assert "notify" in [service.name for service in daemon.services]
    rules = len(daemon.engine.for_seconds())
    assert rules > 50  # the built-in rules, all enabled
    assert counted["files"] == [loader.BUILTIN_RULES_PATH]
    assert counted["rules"] == rules


def test_the_notifier_holds_findings_for_the_engines_rules(tmp_path, running, monkeypatch):
    """Each rule's `for` comes from the engine, the same rules the daemon judges with (a user file's too)."""
    given = []

    class Recorded(notify_module.NotifyService):
        def __init__(self, notify, receivers, broken, outbox, rule_for, *args, **kwargs):
            given.append(rule_for)
            super().__init__(notify, receivers, broken, outbox, rule_for, *args, **kwargs)

    monkeypatch.setattr(notify_module, "NotifyService", Recorded)
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {id: temperature-warning, for: 7m}\n")
    config = parse_config(CONFIG.format(state=tmp_path / "state") + "rule_files: [{}]\n".format(rules),
                          str(tmp_path / "npumon.yaml"))
    daemon = running(Daemon(config, simulated_target(prepare_simulation(str(tmp_path / "sim"), "healthy")),
                            listen="127.0.0.1:0"))
    assert len(given) == 1 and given[0]["temperature-warning"] == 420.0
    assert given[0] == daemon.engine.for_seconds()
