#!/usr/bin/env python3
"""Parse rates of every npu-smi and hccn_tool parser, on one core, in CPU time.

- The main table: the simulated A3 host's `npu-smi info` (8 NPUs x 2 dies = 16 chips, with processes),
  read by parse_info (its fast path answers) and, in the same run, with the fast paths turned off (the
  careful line-by-line reader every table went through before). Target: at least 20,000 tables/s.
- Every `-t` parser (kv.py, extras.py) and every hccn_tool parser (hccn/parse.py, optical.py) on the
  real captures in tests/fixtures/ (the largest capture of each parser is timed; all of them parse).

Each figure is the best of --repeat batches of --number parses, timed with time.process_time() (CPU time
of this process), so other jobs on the machine slow it less than wall time would; the load average is
recorded with the figures anyway.

    python benchmarks/bench_parsers.py               # writes benchmarks/results/parsers.md
    python benchmarks/bench_parsers.py --out -       # print only
"""

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from typing import Callable, List, Tuple

from npumon.sim import prepare_simulation
from npumon.sources.hccn import optical as hccn_optical
from npumon.sources.hccn import parse as hccn
from npumon.sources.npusmi import extras, kv, table
from npumon.sources.runner import CommandRunner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
RESULTS = os.path.join(ROOT, "benchmarks", "results", "parsers.md")
TABLE_TARGET = 20_000

# (parser, capture file name prefix) for the npu-smi `-t` queries and hccn_tool
NPUSMI_PARSERS = [
    (kv.parse_usages, "info-t-usages_"), (kv.parse_common, "info-t-common_"), (kv.parse_power, "info-t-power_"),
    (kv.parse_temp, "info-t-temp_"), (kv.parse_board, "info-t-board"), (kv.parse_memory, "info-t-memory_"),
    (kv.parse_ecc, "info-t-ecc_"), (kv.parse_health, "info-t-health_"), (kv.parse_list, "info-l_"),
    (kv.parse_mapping, "info-m_"), (extras.parse_usages_extra, "info-t-usages_"),
    (extras.parse_common_extra, "info-t-common_"), (extras.parse_memory_extra, "info-t-memory_"),
(extras.parse_ecc_counters, "info-t-ecc_"),
    (extras.parse_chip_identity, "info-t-board-chip_"), (extras.parse_card_serial, "info-t-board-card_"),
]
HCCN_PARSERS = [
    (hccn.parse_link, "link_up"), (hccn.parse_net_health, "net_health_"), (hccn.parse_link_stat, "link_stat_"),
    (hccn.parse_speed, "speed_"), (hccn.parse_stat, "stat_"), (hccn.parse_ip, "ip_"),
    (hccn.parse_fec, "fec_"), (hccn.parse_tls_switch, "tls_switch_"), (hccn.parse_bandwidth, "a5_bandwidth_"),
    (hccn.parse_dev_info_ports, "a5_dev_info_"), (hccn_optical.parse_optical, "optical_"),
]


def capture(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    return text.split("# ---\n", 1)[1] if "# ---\n" in text else text


def captures(directory: str, prefix: str) -> List[Tuple[str, str]]:
    return [(name, capture(os.path.join(directory, name))) for name in sorted(os.listdir(directory))
            if name.startswith(prefix) and name.endswith(".txt")]


def rate(parse: Callable[[str], object], text: str, repeat: int, number: int) -> float:
    """Parses per CPU second: the best of `repeat` batches of `number`."""
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(number):
            parse(text)
        best = min(best, time.process_time() - started)
    return number / best if best > 0 else float("inf")


def a3_table() -> str:
    with tempfile.TemporaryDirectory() as state:
        sim = prepare_simulation(state, "healthy", product="atlas-a3", time_scale=0)
        result = CommandRunner(sim.npu_smi_argv, 10, env=sim.env).run(["info"])
    assert len(table.parse_info(result.stdout).chips) == 16
    return result.stdout


def careful_parse_info(text: str) -> table.MainTable:
    """parse_info with its fast paths off: the reader every table went through before them."""
    fast, table._read_fast = table._read_fast, lambda lines, start: (None, None, None)
    clean, table._read_clean = table._read_clean, lambda text: None
    try:
        return table.parse_info(text)
    finally:
        table._read_fast, table._read_clean = fast, clean


def table_rows(repeat: int, number: int) -> List[str]:
    text = a3_table()
    assert careful_parse_info(text) == table.parse_info(text)
    fast = rate(table.parse_info, text, repeat, number)
    slow = rate(careful_parse_info, text, repeat, number)
    return [
        "| 16-chip main table (simulated A3, {:,} bytes, 16 processes), parse_info | {:,.0f} | {:.1f} us | "
        "at least {:,}: {} |".format(len(text), fast, 1e6 / fast, TABLE_TARGET,
                                     "met" if fast >= TABLE_TARGET else "MISSED"),
        "| same table, careful line-by-line reader (the fast paths off, as before) | {:,.0f} | {:.1f} us | "
        "(speed-up {:.1f}x) |".format(slow, 1e6 / slow, fast / slow),
    ]


def parser_rows(parsers, directory: str, repeat: int, number: int) -> List[str]:
    rows = []
    for parse, prefix in parsers:
        found = captures(directory, prefix)
        if not found:
            rows.append("| `{}` | no capture | | |".format(parse.__name__))
            continue
        readable = []
        for name, text in found:
            try:
                parse(text)
                readable.append((name, text))
            except ValueError:
                pass  # a capture of another layout or an error answer: not this parser's to time
        if not readable:
            rows.append("| `{}` | no capture it reads | | |".format(parse.__name__))
            continue
        name, text = max(readable, key=lambda item: len(item[1]))
        per_second = rate(parse, text, repeat, number)
        rows.append("| `{}.{}` | {} ({:,} bytes) | {:,.0f} | {:.1f} us |".format(
            parse.__module__.rsplit(".", 1)[1], parse.__name__, name, len(text), per_second, 1e6 / per_second))
    return rows


def render(command: str, load: Tuple[float, float], table_lines: List[str], npusmi: List[str],
           hccn_lines: List[str]) -> str:
    lines = [
        "# Benchmark: parse rates of the npu-smi and hccn_tool parsers",
        "",
        "- date: {}".format(datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        "- machine: {} CPUs, {} {}, Python {}".format(os.cpu_count(), platform.system(), platform.machine(),
                                                     platform.python_version()),
        "- command: `{}`".format(command),
        "- load average (1 min) at the start / end: {:.2f} / {:.2f} (the machine is shared; figures are CPU "
        "time of this process, best of the batches)".format(*load),
        "",
        "The table is the simulator's; the other inputs are real captures (tests/fixtures/), no NPU hardware.",
        "",
        "## Main table",
        "",
        "| input | tables/s (one core, CPU time) | per table | target |",
        "|---|---|---|---|",
    ] + table_lines + [
        "",
        "## npu-smi `-t`, `-l` and `-m` parsers (largest capture of each)",
        "",
        "| parser | capture | parses/s | per parse |",
        "|---|---|---|---|",
    ] + npusmi + [
        "",
        "## hccn_tool parsers (largest capture of each)",
        "",
        "| parser | capture | parses/s | per parse |",
        "|---|---|---|---|",
    ] + hccn_lines + [""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=40, help="batches per figure (the best counts)")
    parser.add_argument("--number", type=int, default=200, help="parses per batch")
    parser.add_argument("--out", default=RESULTS, help="where to write the markdown ('-': stdout only)")
    args = parser.parse_args()
    command = "python benchmarks/bench_parsers.py" + "".join(
        " {} {}".format(flag, value) for flag, value, default in (
            ("--repeat", args.repeat, 40), ("--number", args.number, 200)) if value != default)
    load_at_start = os.getloadavg()[0]
    table_lines = table_rows(args.repeat, args.number)
    npusmi = parser_rows(NPUSMI_PARSERS, FIXTURES, args.repeat // 4 or 1, args.number)
    hccn_lines = parser_rows(HCCN_PARSERS, os.path.join(FIXTURES, "hccn"), args.repeat // 4 or 1, args.number)
    text = render(command, (load_at_start, os.getloadavg()[0]), table_lines, npusmi, hccn_lines)
    print(text)
    if args.out != "-":
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
