"""The main table's fast path (table_fast.py) answers exactly what the careful line-by-line reader answers.

Every example is a real capture, intact or damaged (tests/damaged_text.py), read three ways: through
parse_info (the in-place reading of a clean text first, then the fast path over the stripped lines), with
the in-place reading off, and with both fast paths off. Records, problems and errors must be equal, with and
without skip_bad_rows. Below them: the text the in-place reading must leave to the lines, and the column
conversions against their careful converters.
"""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from damaged_text import damaged_captures
from npumon.sim import prepare_simulation
from npumon.sim.products import PRODUCTS
from npumon.sources.npusmi import table, table_fast
from npumon.sources.npusmi.common import NpuSmiParseError
from npumon.sources.runner import CommandRunner
from paths import FIXTURES

CAPTURES = sorted(
    path.read_text().split("# ---\n", 1)[1]
    for path in Path(FIXTURES).glob("*.txt")
    if not path.name.startswith(("version-files_", "dev-"))
)
TABLES = [text for text in CAPTURES if "Health" in text and "NPU" in text]
# Each example is read four to six ways: 500 a test (not the profile's 2,000) keeps this file's share of the
# default suite to about a quarter of what it was; the parsers' own robustness properties keep the profile's.
DIFFERENTIAL = settings(max_examples=500, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
NOISE = st.sampled_from(["|", "+", "/", " ", "\t", "\n", "NA", "-", "0x", "999999999999", "nan", "inf", "é",
                         "\xa0", "\x1f", "Process id", "No running processes found in NPU", "1e5", "1_0",
                         "\r", "\x0c", "\x1c", "\n\n", "  \n", "\n  ", "[WARNING]x\n", "N/A", "Failed"])


def outcome(text, skip_bad_rows):
    try:
        return table.parse_info(text, skip_bad_rows=skip_bad_rows)
    except NpuSmiParseError as exc:
        return "error: {}".format(exc)


def careful(text, skip_bad_rows, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(table, "_read_fast", lambda lines, start: (None, None, None))
        patch.setattr(table, "_read_clean", lambda text: None)
        return outcome(text, skip_bad_rows)


def test_the_fast_path_reads_the_well_formed_captures():
    fast_reads = 0
    for text in TABLES:
        lines = list(filter(None, map(str.strip, text.splitlines())))
        header_at = table._find_chip_header(lines)
        if header_at is not None and table._read_fast(lines, header_at + 2)[0] is not None:
            fast_reads += 1
    assert fast_reads >= len(TABLES) // 2  # else the fast path is dead code and this file proves nothing


@pytest.mark.parametrize("index", range(len(TABLES)))
def test_every_capture_reads_the_same_both_ways(index, monkeypatch):
    text = TABLES[index]
    for skip_bad_rows in (False, True):
        assert outcome(text, skip_bad_rows) == careful(text, skip_bad_rows, monkeypatch)
        assert joined(text, skip_bad_rows, monkeypatch) == careful(text, skip_bad_rows, monkeypatch)


@DIFFERENTIAL
@given(damaged_captures(TABLES, NOISE, digit_run=12))
def test_damaged_captures_read_the_same_both_ways(monkeypatch, text):
    for skip_bad_rows in (False, True):
        assert outcome(text, skip_bad_rows) == careful(text, skip_bad_rows, monkeypatch)
        assert joined(text, skip_bad_rows, monkeypatch) == careful(text, skip_bad_rows, monkeypatch)


def joined(text, skip_bad_rows, monkeypatch):
    """parse_info with the in-place reading off: the fast path over the stripped lines answers where it can."""
    with monkeypatch.context() as patch:
        patch.setattr(table, "_read_clean", lambda text: None)
        return outcome(text, skip_bad_rows)


def test_the_in_place_path_reads_the_clean_captures():
    clean_reads = [text for text in TABLES if table._read_clean(text) is not None]
    assert len(clean_reads) >= len(TABLES) // 2  # else it is dead code and the tests above prove nothing of it


@pytest.fixture(scope="module")
def simulated_tables(tmp_path_factory):
    """Each simulated product's `npu-smi info`, by product name; the A3's (16 chips, 16 processes) is what
    benchmarks/bench_parsers.py times."""
    tables = {}
    for product in PRODUCTS:
        sim = prepare_simulation(str(tmp_path_factory.mktemp(product)), "healthy", product=product, time_scale=0)
        tables[product] = CommandRunner(sim.npu_smi_argv, 10, env=sim.env, spawn=sim.spawn).run(["info"]).stdout
    return tables


def test_every_simulated_table_is_read_in_place(simulated_tables):
    assert [product for product, text in simulated_tables.items() if table._read_clean(text) is None] == []


@DIFFERENTIAL
@given(st.data())
def test_damaged_simulated_tables_read_the_same_every_way(simulated_tables, monkeypatch, data):
    text = data.draw(damaged_captures(sorted(simulated_tables.values()), NOISE, digit_run=12))
    for skip_bad_rows in (False, True):
        assert outcome(text, skip_bad_rows) == careful(text, skip_bad_rows, monkeypatch)
        assert joined(text, skip_bad_rows, monkeypatch) == careful(text, skip_bad_rows, monkeypatch)


def test_the_simulated_a3_table_is_read_in_place_and_reads_the_same_every_way(simulated_tables, monkeypatch):
    text = simulated_tables["atlas-a3"]
    read = table._read_clean(text)
    assert read is not None and len(read.chips) == 16 and len(read.processes) == 16
    assert read.chips[1].power_watts is None and read.chips[0].power_watts is not None  # the die printing '-'
    for skip_bad_rows in (False, True):
        assert outcome(text, skip_bad_rows) == read
        assert joined(text, skip_bad_rows, monkeypatch) == read
        assert careful(text, skip_bad_rows, monkeypatch) == read


CLEAN = "info_a3_910-93_4chips_proc_v25.2.0_fixture.txt"  # clean, with an idle-NPU row and processes
FIRST_ROW = "| 0     Ascend910"


def line_edited(text, marker, edit):
    """`text` with the line that holds `marker` first replaced by edit(line)."""
    start = text.rindex("\n", 0, text.index(marker)) + 1
    end = text.index("\n", start)
    return text[:start] + edit(text[start:end]) + text[end:]


def first_row_edited(text, edit):
    return line_edited(text, FIRST_ROW, edit)


# Text the in-place reading leaves to the line-based reading: each reads as the clean capture does.
UNCLEAN = {
    "padded row": lambda text: first_row_edited(text, lambda row: row + "  "),
    "indented row": lambda text: first_row_edited(text, lambda row: "  " + row),
    "tab in a row": lambda text: first_row_edited(text, lambda row: row.replace("  ", "\t", 1)),
    "\\x1f in a row": lambda text: first_row_edited(text, lambda row: row.replace("  ", " \x1f", 1)),
    "padded header": lambda text: text.replace("| NPU   Name", "  | NPU   Name", 1),
    "padded process header": lambda text: line_edited(text, "Process id", lambda row: row + " "),
    "blank line between chips": lambda text: text.replace("\n+-", "\n\n+-", 2),
    "CRLF": lambda text: text.replace("\n", "\r\n"),
    "form feed line break": lambda text: first_row_edited(text, lambda row: row + "\x0c"),
    "trailing blank lines": lambda text: text + "\n\n",
}


@pytest.mark.parametrize("edit", sorted(UNCLEAN))
def test_unclean_text_is_left_to_the_lines_and_reads_the_same(edit, monkeypatch):
    text = (Path(FIXTURES) / CLEAN).read_text().split("# ---\n", 1)[1]
    expected = table.parse_info(text)
    assert table._read_clean(text) == expected
    edited = UNCLEAN[edit](text)
    assert edited != text
    assert table._read_clean(edited) is None
    for skip_bad_rows in (False, True):
        assert outcome(edited, skip_bad_rows) == expected
        assert careful(edited, skip_bad_rows, monkeypatch) == expected


def test_a_tab_or_x1f_is_read_by_the_fast_path_with_its_whitespace_classes():
    text = (Path(FIXTURES) / CLEAN).read_text().split("# ---\n", 1)[1]
    expected = table.parse_info(text)
    for edit in ("tab in a row", "\\x1f in a row"):
        lines = list(filter(None, map(str.strip, UNCLEAN[edit](text).splitlines())))
        assert not table_fast.spaces_only("\n".join(lines))
        header_at = table._find_chip_header(lines)
        chips, _, processes = table._read_fast(lines, header_at + 2)
        assert (tuple(chips), tuple(processes)) == (expected.chips, expected.processes)


def test_a_padded_border_is_still_read_in_place():
    text = (Path(FIXTURES) / CLEAN).read_text().split("# ---\n", 1)[1]
    start = text.index("\n+", text.index(FIRST_ROW)) + 1
    end = text.index("\n", start)
    padded = text[:end] + "   " + text[end:]
    assert table._read_clean(padded) == table.parse_info(text)


@pytest.mark.parametrize("bus_id", ["NA", "N/A", "-", "--", "Failed", "0000:9c:00.7", "9C:00.0", "0000:9C:00.8",
                                    "0000:9C:00.0x", "NA0", "x"])
def test_the_fast_row_regex_takes_the_bus_ids_and_null_tokens_the_careful_converter_takes(bus_id, monkeypatch):
    text = (Path(FIXTURES) / CLEAN).read_text().split("# ---\n", 1)[1]
    edited = text.replace("0000:9C:00.0", bus_id.ljust(12), 1)
    for skip_bad_rows in (False, True):
        assert outcome(edited, skip_bad_rows) == careful(edited, skip_bad_rows, monkeypatch)
        assert joined(edited, skip_bad_rows, monkeypatch) == careful(edited, skip_bad_rows, monkeypatch)
    read = table._read_clean(edited)
    if bus_id in ("NA", "N/A", "-", "--", "Failed", "0000:9c:00.7"):
        assert read is not None and read.chips[0].bus_id == (None if bus_id[0] != "0" else bus_id)
    else:
        assert read is None and isinstance(careful(edited, False, monkeypatch), str)  # the careful reader's error


HEADER_PIECES = st.sampled_from(["NPU", "ID", "Health", "Util(%)", "NPU ID", "NPU Util(%)", "|", " ", "  ", "\t",
                                 "x", "IDHealth", "NPUx", "Name", "\xa0", "NPU|ID", "Health|", "|Health", "Chip"])


@DIFFERENTIAL
@given(st.lists(HEADER_PIECES, max_size=10).map("".join))
def test_the_chip_header_test_by_words_answers_as_the_header_names_do(line):
    names = table._HEADER_NAME.findall(line.replace("|", " "))
    by_names = "Health" in names and ("NPU" in names or "NPU ID" in names)
    assert table._is_chip_header.__wrapped__(line) == by_names


# --- column conversions -------------------------------------------------------------------------------------

TOKENS = st.one_of(
    st.sampled_from(["0", "1", "15", "255", "256", "007", "+5", "-3", "-", "NA", "N/A", "--", "", "Failed", "0x1f",
                     "1_0", "1e5", "150.0", "nan", "inf", "-inf", "1e308", "1e400", " 5", "NA ", " ", "x", "٣",
                     "0000:9D:00.0", "0000:9d:00.7", "0000:9D:00.8"]),
    st.text(alphabet="0123456789-+.xe:", max_size=6))
COLUMNS = st.one_of(st.lists(TOKENS, min_size=1, max_size=8),
                    st.tuples(TOKENS, st.integers(min_value=1, max_value=8)).map(lambda pair: [pair[0]] * pair[1]))


def converted(convert, tokens):
    try:
        return [(type(value), value) for value in convert(tokens)]
    except NpuSmiParseError:
        return "error"


@DIFFERENTIAL
@given(COLUMNS)
def test_each_column_conversion_gives_what_its_careful_converter_gives_token_by_token(tokens):
    for careful_converter, column in table._COLUMN_KINDS.items():
        by_column = converted(lambda tokens: column(tuple(tokens), careful_converter), tokens)
        assert by_column == converted(lambda tokens: [careful_converter(token) for token in tokens], tokens)


def test_a_null_token_among_numbers_leaves_the_numbers_to_float():
    seen = []

    def careful_float(token):
        seen.append(token)
        return table._float(token)

    # the A3's second die prints '-' for power: the column is not read the careful way for it
    assert table_fast.float_column(("150.0", "-", "164.8", "-"), careful_float) == [150.0, None, 164.8, None]
    assert table_fast.float_column(("52", "-", "1e3"), careful_float) == [52.0, None, 1000.0]
    assert seen == []
    with pytest.raises(NpuSmiParseError):
        table_fast.float_column(("150.0", "-", "hot"), careful_float)


def test_records_keep_the_last_column_of_a_field_and_copy_aliases():
    records = table_fast.Records(table.TableProcess, table._PROCESS_DEFAULTS, ("npu", "pid", "pid", "name"),
                                 (table._int, table._int, table._int, table._text), table._COLUMN_KINDS,
                                 ("npu", "pid"), (("container_pid", "pid"),))
    rows = [("whole", "1", "10", "11", " a "), ("whole", "2", "20", "21", "")]
    assert records.build(rows) == [table.TableProcess(npu=1, chip=None, pid=11, name="a", memory_mb=None,
                                                      container_pid=11),
                                   table.TableProcess(npu=2, chip=None, pid=21, name=None, memory_mb=None,
                                                      container_pid=21)]
    with pytest.raises(NpuSmiParseError):
        records.build([("whole", "NA", "10", "11", "a")])  # a required id missing
    with pytest.raises(NpuSmiParseError):
        records.build([("whole", "1", "10", "x", "a")])
    with pytest.raises(NpuSmiParseError):  # a bad value in a column a later one overrides is still an error
        records.build([("whole", "1", "x", "11", "a")])
