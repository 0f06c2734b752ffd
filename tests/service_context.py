"""A ServiceContext as the daemon builds one, for tests that build services without a daemon."""

from npumon.rules.engine import RuleEngine
from npumon.services.context import ServiceContext
from npumon.services.events.store import EventStore, events_path
from npumon.sources.runner import CommandRunner
from npumon.sources.target import Target


def open_context(config, root, npu_smi=None):
    """The context for `config` on a host under `root` (nothing there: npu-smi is not called), with its event
    history open when the config keeps one; close it with `close_context`."""
    target = Target(["npu-smi"], None, str(root))
    runner = npu_smi or CommandRunner(target.npu_smi_argv, config.npu_smi_timeout_seconds)
    return ServiceContext.open(config, RuleEngine([], {}), target, runner)


def close_context(context):
    if context.events is not None:
        context.events.close()


def recorded(context):
    """(kind, subject) of every event the context's history holds, oldest first."""
    assert context.events.flush()
    store = EventStore(events_path(context.config.state_dir), readonly=True)
    try:
        return [(event.kind, event.subject) for event in store.query()]
    finally:
        store.close()
