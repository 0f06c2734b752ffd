"""A Snapshot as /metrics would serve it, and one family's samples read back: for tests that check what a
source's values look like on the exporter without a daemon."""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from npumon.outputs.exporter import ExporterView, render_families


def exposition(snapshot, compat=False):
    """The text exposition of `snapshot` (no findings), with npu-exporter's families when `compat`."""
    registry = CollectorRegistry()

    class Collector:
        def collect(self):
            return render_families(ExporterView(snapshot=snapshot, findings=[]), npu_exporter_compat=compat)

    registry.register(Collector())
    return generate_latest(registry).decode()


def family_samples(text, name):
    """{sorted label items: value} of family `name` in `text`; {} when it is not there."""
    family = next((f for f in text_string_to_metric_families(text) if f.name == name), None)
    return {} if family is None else {tuple(sorted(s.labels.items())): s.value for s in family.samples}
