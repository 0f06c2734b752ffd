"""Families' parts and RowsMemo (outputs/families.py): rows merged from a part are the rows the same adds would
have made in place, and a render that reuses a chip's kept rows writes what a render from scratch writes."""

import dataclasses

import pytest

from simulated_pass import judged_pass
from npumon.outputs import link_metrics, npu_exporter_links, npu_exporter_network
from npumon.outputs.exporter import ExporterView, render_rows
from npumon.outputs.families import Families, MetricSpec, RowsMemo
from npumon.sources.hccn import metrics as hccn_metrics

SPECS = {"npumon_a": MetricSpec("npumon_a", ("x",), "a"), "npumon_b": MetricSpec("npumon_b", (), "b")}


def _adds(out, adds):
    for name, value, labels in adds:
        out.add(name, value, labels)


def test_a_merged_part_holds_the_rows_its_adds_would_have_made_in_place():
    first = [("npumon_b", 1, ()), ("npumon_a", 2, ("p",))]
    second = [("npumon_a", 3, ("q",)), ("npumon_a", 9, ("p",)), ("npumon_b", -0.0, ()), ("npumon_a", None, ("r",))]
    in_place = Families(SPECS)
    _adds(in_place, first + second)
    merged = Families(SPECS)
    _adds(merged, first)
    part = merged.part()
    _adds(part, second)
    merged.merge(part)
    assert merged.rows() == in_place.rows()  # order, and a label set's first value (p: 2, b: 1)
    assert merged.negative_zero == part.negative_zero == {"npumon_b"}
    merged.add("npumon_a", 4, ("s",))
    assert ("s",) not in {name: rows for name, _, rows in part.rows()}["npumon_a"]  # the part stays as it was


def test_the_memo_fills_again_only_when_the_inputs_or_the_specs_change_and_keeps_at_most_its_limit():
    memo, fills = RowsMemo(limit=2), []

    def render(subject, inputs, specs=SPECS):
        out = Families(specs)

        def fill(part):
            fills.append((subject, inputs))
            part.add("npumon_a", inputs, (subject,))
        memo.add(out, subject, inputs, fill)
        return out.rows()

    assert render("c0", 1) == render("c0", 1) and len(fills) == 1
    assert render("c0", 2)[0][2] == {("c0",): 2.0} and len(fills) == 2
    render("c0", 2, specs=dict(SPECS))  # another registry's specs: its own rows
    assert len(fills) == 3
    render("c1", 1)
    render("c2", 1)  # c0 is the oldest of three: forgotten
    render("c0", 2, specs=dict(SPECS))
    assert len(fills) == 6


@pytest.fixture(scope="module")
def a3_network_pass(tmp_path_factory):
    return judged_pass(tmp_path_factory.mktemp("families"), "healthy", "network: {enabled: true}\n",
                       product="atlas-a3")


@pytest.mark.parametrize("compat", [False, True])
def test_a_render_with_the_chips_kept_rows_writes_what_a_render_from_scratch_writes(a3_network_pass, monkeypatch,
                                                                                   compat):
    snapshot, findings = a3_network_pass
    assert all(chip.extra.get("network") and chip.hccs for chip in snapshot.chips)
    chips = list(snapshot.chips)
    # the next render: one chip's link went down, another's HCCS counters moved, the rest as they were
    down = dict(chips[0].extra["network"], link_status="DOWN", link_down_count=1)
    chips[0] = dataclasses.replace(chips[0], extra=dict(chips[0].extra, network=down))
    links = [dict(link, crc_errors=(link.get("crc_errors") or 0) + 5) for link in chips[3].hccs["links"]]
    chips[3] = dataclasses.replace(chips[3], hccs=dict(chips[3].hccs, links=links))
    later = ExporterView(dataclasses.replace(snapshot, chips=tuple(chips), time=snapshot.time + 15), findings)

    render_rows(ExporterView(snapshot, findings), compat)  # the memos now hold every chip's rows
    warm = render_rows(later, compat).rows()
    for module in (hccn_metrics, link_metrics, npu_exporter_links, npu_exporter_network):
        monkeypatch.setattr(module, "_ROWS", RowsMemo())
    assert warm == render_rows(later, compat).rows()
    network_up = {name: rows for name, _, rows in warm}["npumon_chip_network_link_up"]
    assert network_up[(str(chips[0].npu), str(chips[0].chip))] == 0.0
