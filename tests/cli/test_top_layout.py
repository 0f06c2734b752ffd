"""`npumon top`'s screen without a terminal: bars, sparklines, chip rows, sorting, the filter, the keys and
frames of every size, from documents shaped as /status serves them."""

import copy

import pytest

from npumon.tui import rows, widgets
from npumon.tui.frame import render_frame, shown_chips
from npumon.tui.history import History
from npumon.tui.keys import ViewState, handle_key

NOW = 1767225600.0  # 2026-01-01T00:00:00Z
GIB = 2**30


def chip(npu, temperature, power, aicore, used_gib=10.0, health="OK", **extra):
    data = {"npu": npu, "chip": 0, "name": "910B3", "health": health, "bus_id": "0000:{:02X}:00.0".format(npu),
            "temperature_celsius": temperature, "power_watts": power, "aicore_ratio": aicore,
            "aivector_ratio": 0.3, "hbm_bandwidth_ratio": 0.25, "hbm_used_bytes": used_gib * GIB,
            "hbm_total_bytes": 64 * GIB, "memory_used_bytes": None, "memory_total_bytes": None,
            "processes": [{"npu": npu, "chip": 0, "pid": 100 + npu, "name": "vllm", "memory_bytes": 8 * GIB}],
            "error_codes": [], "network": None, "probe": None}
    data.update(extra)
    return data


def document(chips=None, findings=None, time="2026-01-01T00:00:00Z"):
    return {"schema": "npumon.check/v1", "host": "atlas-01", "time": time, "status": "critical",
            "chips": chips if chips is not None else [
                chip(0, 87, 290.0, 0.61), chip(1, 83, 260.0, 0.67), chip(2, 55, 95.0, 0.70),
                chip(3, None, None, None, used_gib=60.0, health="Critical")],
            "findings": findings if findings is not None else [
                {"rule": "temperature-critical", "severity": "critical", "subject": "npu0/chip0",
                 "summary": "temperature 87 C, at or above the critical 85 C", "hint": "Check the airflow first.",
                 "shadow": False}],
            "sources": {"npu-smi": {"ok": True, "error": None, "last_success": NOW - 3},
                        "npu-smi:ecc": {"ok": False, "error": "not polled yet", "last_success": None},
                        "npu-smi:power": {"ok": False, "error": "timed out after 10s", "last_success": NOW - 400}},
            "host_facts": {"cpu_ratio": 0.2, "load1": 1.5}}


def order(document_, state):
    return [c["npu"] for c in shown_chips(document_, state)]


def text(lines):
    return [line for line, _ in lines]


def test_bar_fills_with_the_ratio_and_keeps_its_width():
    assert widgets.bar(0.5, 17) == "[|||||     ]  50%"
    assert len(widgets.bar(0.33, 16)) == 16
    assert widgets.bar(1.7, 12) == "[|||||] 170%"  # clamped bar, the value as reported
    assert widgets.bar(None, 12) == "[     ]    -"
    assert widgets.bar(float("nan"), 12) == "[     ]    -"
    assert widgets.bar(0.42, 3) == "42%" and widgets.bar(0.42, 0) == ""


def test_sparkline_scales_keeps_the_newest_last_and_shows_gaps():
    assert widgets.sparkline([0, 50, 100], 3) == "▁▅█"
    assert widgets.sparkline([0, 50, 100], 5) == "  ▁▅█"
    assert widgets.sparkline(list(range(100)), 4, unicode=False) == "_-*@"  # the last 4, scaled among themselves
    assert widgets.sparkline([1, None, 3], 3, unicode=False) == "_ @"
    assert widgets.sparkline([5, 5], 2, unicode=False) == "++"  # a flat line sits in the middle
    assert widgets.sparkline([50], 1, low=0, high=100) == "▅"
    assert widgets.sparkline([None, None], 2) == "  " and widgets.sparkline([1], 0) == ""


def test_fit_marks_what_it_cuts():
    assert widgets.fit("abcdef", 4) == "abc~" and widgets.fit("abc", 4) == "abc" and widgets.fit("abc", 0) == ""


@pytest.mark.parametrize("key,expected", [
    ("npu", [0, 1, 2, 3]), ("temp", [0, 1, 2, 3]), ("power", [0, 1, 2, 3]), ("util", [2, 1, 0, 3]),
    ("hbm", [3, 0, 1, 2]), ("health", [3, 0, 1, 2]),
])
def test_sort_puts_the_worst_first_and_unknown_values_last(key, expected):
    assert order(document(), ViewState(sort=key)) == expected


def test_reverse_flips_the_known_values_but_unknown_stay_last():
    assert order(document(), ViewState(sort="util", reverse=True)) == [0, 1, 2, 3]
    assert order(document(), ViewState(sort="temp", reverse=True)) == [2, 1, 0, 3]
    assert order(document(), ViewState(sort="npu", reverse=True)) == [3, 2, 1, 0]


def test_ties_keep_the_npu_order():
    tied = document(chips=[chip(2, 50, 1, 0.5), chip(0, 50, 1, 0.5), chip(1, 50, 1, 0.5)])
    assert order(tied, ViewState(sort="temp")) == [0, 1, 2]


@pytest.mark.parametrize("text_,expected", [
    ("", [0, 1, 2, 3]), ("2", [2]), ("2/0", [2]), ("2/1", []), ("npu1/chip0", [1]), ("critical", [3]),
    ("0000:01", [1]), ("VLLM", [0, 1, 2, 3]), ("nothing", []),
])
def test_filter(text_, expected):
    assert order(document(), ViewState(filter=text_)) == expected


def test_keys_sort_filter_select_detail_help_and_quit():
    shown = [(0, 0), (1, 0), (2, 0)]
    state = ViewState()
    state = handle_key(state, "s", shown)
    assert state.sort == "temp"
    assert handle_key(state, "t", shown).reverse is True  # the same sort again flips it
    assert handle_key(ViewState(sort="health"), "s", shown).sort == "npu"  # `s` cycles round
    assert handle_key(state, "p", shown) == ViewState(sort="power")
    assert handle_key(state, "u", shown).sort == "util"
    editing = handle_key(state, "/", shown)
    for key in "3/0":
        editing = handle_key(editing, key, shown)
    assert editing.editing == "3/0" and editing.filter == ""
    assert handle_key(editing, "q", shown).quit is False  # typed into the filter, not a quit
    applied = handle_key(handle_key(editing, "BACKSPACE", shown), "ENTER", shown)
    assert (applied.filter, applied.editing) == ("3/", None)
    assert handle_key(handle_key(applied, "f", shown), "ESC", shown).filter == "3/"  # Esc cancels the edit
    assert handle_key(applied, "ESC", shown).filter == ""  # and then clears the filter
    down = handle_key(handle_key(handle_key(handle_key(state, "DOWN", shown), "j", shown), "DOWN", shown), "DOWN", shown)
    assert down.selected == 2
    assert handle_key(down, "UP", shown).selected == 1
    detail = handle_key(down, "ENTER", shown)
    assert detail.detail == (2, 0)
    assert handle_key(detail, "s", shown) == detail  # sorting keys do nothing in the detail
    assert handle_key(detail, "ESC", shown).detail is None
    assert handle_key(ViewState(), "ENTER", []).detail is None  # nothing to open
    helped = handle_key(state, "?", shown)
    assert helped.help and not handle_key(helped, "x", shown).help
    assert handle_key(detail, "q", shown).quit and handle_key(helped, "q", shown).quit


def test_overview_shows_every_chip_the_finding_its_hint_and_the_sources():
    lines = render_frame(document(), ViewState(), History(), 160, 50, origin="test", now=NOW + 1)
    screen = text(lines)
    assert screen[0] == "npumon top | host atlas-01 | 4 chips | CRITICAL | read 1s ago | test"
    assert lines[0][1] == "critical"
    header = screen.index(next(line for line in screen if line.startswith("NPU  CHIP")))
    assert [line.split()[0] for line in screen[header + 1:header + 5]] == ["0", "1", "2", "3"]
    assert "87C" in screen[header + 1] and "290.0W" in screen[header + 1] and "61%" in screen[header + 1]
    assert lines[header + 1][1] == "selected" and lines[header + 4][1] == "critical"  # health Critical
    assert any("CRITICAL  npu0/chip0   temperature-critical: temperature 87 C" in line for line in screen)
    assert any("hint: Check the airflow first." in line for line in screen)
    sources = [line.split() for line in screen if line.startswith("  npu-smi")]
    assert sources == [["npu-smi", "ok", "last", "success", "4s", "ago"],
                       ["npu-smi:ecc", "pending", "last", "success", "never", "-", "not", "polled", "yet"],
                       ["npu-smi:power", "FAILED", "last", "success", "7m", "ago", "-", "timed", "out", "after", "10s"]]
    assert screen[-1].startswith("q quit")
    assert all(len(line) <= 160 for line in screen)


def test_pods_network_and_probe_cells_show_where_the_document_has_them():
    chips = [chip(0, 50, 100.0, 0.5, pods=[{"namespace": "ai", "name": "llama-0"}, "other"],
                  network={"link_status": "DOWN", "net_health": "Unreachable"},
                  probe={"state": "failed", "failed_stage": "memcpy", "error_code": 507053}),
             chip(1, 50, 100.0, 0.5, probe={"state": "ok", "duration_seconds": 0.012})]
    screen = text(render_frame(document(chips=chips, findings=[]), ViewState(), History(), 200, 40, now=NOW))
    header = next(line for line in screen if line.startswith("NPU"))
    assert "PODS" in header
    row = next(line for line in screen if line.startswith("0 "))
    assert "ai/llama-0 +1" in row and "DOWN Unreachable" in row and "FAILED memcpy 507053" in row
    assert "ok 12ms" in next(line for line in screen if line.startswith("1 "))
    without = text(render_frame(document(findings=[]), ViewState(), History(), 200, 40, now=NOW))
    assert "PODS" not in next(line for line in without if line.startswith("NPU"))


@pytest.mark.parametrize("width,height", [(1, 1), (10, 3), (40, 8), (80, 24), (20, 60), (300, 2)])
def test_every_size_fits_and_the_key_line_stays(width, height):
    for state in (ViewState(), ViewState(detail=(0, 0)), ViewState(help=True), ViewState(editing="3")):
        lines = render_frame(document(), state, History(), width, height, now=NOW)
        assert len(lines) <= height and all(len(line) <= width for line, _ in lines)
        assert lines[-1][0].startswith(("q quit", "filter")[state.editing is not None][:width])


def test_a_short_screen_cuts_a_section_with_a_count():
    screen = text(render_frame(document(), ViewState(), History(), 160, 7, now=NOW))
    assert len(screen) == 7 and screen[-2].startswith("  ... ") and "more line" in screen[-2]


def test_detail_shows_processes_error_codes_findings_and_a_history_sparkline():
    history = History()
    for second, temperature in enumerate((60, 70, 80, 87)):
        moment = document(time="2026-01-01T00:00:0{}Z".format(second))
        moment["chips"][0]["temperature_celsius"] = temperature
        assert history.record(moment)
        assert not history.record(copy.deepcopy(moment))  # the same reading again adds nothing
    base = document()
    base["chips"][0]["error_codes"] = ["A4025021"]
    base["chips"][0]["error_information"] = ["A4025021 HBM multi-bit ECC error"]
    base["chips"][0]["network"] = {"link_status": "DOWN", "speed_mbps": 200000, "net_health": "Unreachable",
                                   "link_up_count": 2, "link_down_count": 3,
                                   "link_changes": [{"time": "2026-01-01T00:00:00Z", "state": "DOWN"}]}
    screen = text(render_frame(base, ViewState(detail=(0, 0)), history, 120, 40, now=NOW, unicode=False))
    assert screen[2].startswith("CHIP npu0/chip0  910B3  health OK")
    line = next(line for line in screen if line.startswith("  temperature C"))
    assert line.endswith(" _=*@ (min 60, max 87)")
    assert any(line.split() == ["100", "vllm", "8.0", "GiB"] for line in screen)
    assert ("  port DOWN  200 Gb/s  net health Unreachable  link up 2 / down 3  last changes: DOWN "
            "2026-01-01T00:00:00Z") in screen
    assert "ERROR CODES: A4025021" in screen and "  A4025021 HBM multi-bit ECC error" in screen
    assert any("temperature-critical" in line for line in screen)
    gone = text(render_frame(base, ViewState(detail=(9, 0)), history, 120, 40, now=NOW))
    assert any("npu9/chip0 is not in the latest reading" in line for line in gone)


def test_history_is_bounded_in_samples_and_age():
    history = History(max_samples=3, max_age_seconds=5)
    for second in range(8):
        history.record(document(time="2026-01-01T00:00:0{}Z".format(second)))
    assert len(history.values(0, 0, "temp")) == 3
    history.record(document(time="2026-01-01T00:01:00Z"))
    assert history.values(0, 0, "temp") == [87]
    assert not history.record({"time": "yesterday"}) and not history.record({})


def test_waiting_error_and_unknown_shapes_never_crash():
    assert text(render_frame(None, ViewState(), History(), 80, 10, origin="http://x/status",
                             error="cannot read http://x/status: connection refused"))[:3] == [
        "npumon top - http://x/status", "! cannot read http://x/status: connection refused",
        "waiting for the first reading ..."]
    odd = {"chips": [{"npu": "x"}, "not a chip", {}], "findings": [None, {}], "sources": {"a": None, "b": {}}}
    for state in (ViewState(sort=key) for key in rows.SORTS):
        render_frame(odd, state, History(), 120, 30, error="stale")
    render_frame(odd, ViewState(detail=("x", None)), History(), 120, 30)
