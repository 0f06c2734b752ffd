"""A one-shot quick pass (`npumon check`) asks `-t ecc` of the cards `info -l` lists while the main table is
still being read, so that a 16-chip A3's pass is the slower of the two, not their sum (issue 34)."""

import sys
import textwrap
import time

from npumon.sources.npusmi.identity import IdentityCache
from npumon.sources.npusmi.source import NpuSmiSource
from npumon.sources.runner import CommandRunner
from paths import FIXTURES


def body(name):
    with open("{}/{}".format(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read().split("# ---\n", 1)[1]


def fake_npu_smi(tmp_path, wait_for_ecc):
    """`info` waits (at most `wait_for_ecc` seconds) until an `-t ecc` call has begun, and logs when it starts and
    ends. A test that expects an ecc call beside the table waits long (it comes at once, unless the machine is
    very busy); one that expects none waits a short while."""
    (tmp_path / "wait").write_text(str(wait_for_ecc))
    for name, fixture in (("table", "info_910b3_8npu_v23.0.7.txt"), ("list", "info-l_910b_8npu_v25.5.1_fixture.txt"),
                          ("ecc", "info-t-ecc_910a_ddr-hbm_v23.0.5_doc.txt")):
        (tmp_path / name).write_text(body(fixture))
    script = tmp_path / "npu-smi"
    script.write_text(textwrap.dedent("""\
        #!{python} -S
        import os, sys, time
        d, args = {d!r}, sys.argv[1:]
        def log(line):
            with open(os.path.join(d, "log"), "a") as f:
                f.write(line + "\\n")
        if args == ["info"]:
            log("table start")
            waited = time.monotonic() + float(open(os.path.join(d, "wait")).read())
            while not os.path.exists(os.path.join(d, "ecc-asked")) and time.monotonic() < waited:
                time.sleep(0.02)
            log("table end")
            sys.stdout.write(open(os.path.join(d, "table")).read())
        elif args == ["info", "-l"]:
            log("list")
            sys.stdout.write(open(os.path.join(d, "list")).read())
        elif args[:3] == ["info", "-t", "ecc"]:
            log("ecc " + args[4])  # logged before the table can see it asked: "ecc" comes before "table end"
            open(os.path.join(d, "ecc-asked"), "w").close()
            sys.stdout.write(open(os.path.join(d, "ecc")).read())
        else:
            print("This device does not support querying {{}}.".format(args[2] if len(args) > 2 else ""))
        """).format(python=sys.executable, d=str(tmp_path)))
    script.chmod(0o755)
    return [str(script)]


def test_a_quick_pass_asks_ecc_beside_the_table(tmp_path):
    runner = CommandRunner(fake_npu_smi(tmp_path, wait_for_ecc=30), 20, 8, priority_slots=1)
    runner.not_after = time.monotonic() + 60  # a one-shot pass under a deadline, as `npumon check` makes it
    source = NpuSmiSource(runner, intervals={"ecc": 300.0, "health": 60.0}, quick_pass=True)
    try:
        source.poll("npu-smi")
        source.poll("npu-smi:ecc")
        log = (tmp_path / "log").read_text().splitlines()
        log = [line for line in log if line != "list"]
        assert log.index("table end") > log.index("table start") + 1, log  # an ecc call came while it ran
        assert sorted(line for line in log if line.startswith("ecc")) == ["ecc {}".format(n) for n in range(8)]
        status = source.statuses(time.time())["npu-smi:ecc"]
        assert status.ok and not status.left_out, status
        chips = source.chips(time.time())
        assert len(chips) == 8 and all(chip.ecc_double_bit_errors is not None for chip in chips)
        # taken once: the next poll asks the cards again, after the table
        (tmp_path / "log").write_text("")
        source.poll("npu-smi:ecc")
        assert len((tmp_path / "log").read_text().splitlines()) == 8
    finally:
        runner.terminate_all()


def test_the_daemon_asks_nothing_beside_the_table(tmp_path):
    runner = CommandRunner(fake_npu_smi(tmp_path, wait_for_ecc=5), 20, 8, priority_slots=1)
    source = NpuSmiSource(runner, intervals={"ecc": 300.0}, quick_pass=False)
    try:
        source.poll("npu-smi")  # waits out its 5 s: no ecc call comes while it runs
        assert (tmp_path / "log").read_text().splitlines() == ["table start", "table end"]
    finally:
        runner.terminate_all()


def test_a_quick_pass_takes_the_cards_from_the_identity_file_instead_of_asking_info_l(tmp_path):
    # the daemon's identity file lists the cards: `-t ecc` starts with the table, not 1.5 s later (the A3)
    first = NpuSmiSource(CommandRunner(fake_npu_smi(tmp_path, wait_for_ecc=0), 20, 8, priority_slots=1),
                         intervals={"ecc": 300.0})
    first.poll("npu-smi")
    cache = IdentityCache(str(tmp_path / "npu-smi-identity.json"))
    cache.save(first.chips(time.time()), time.time())
    first.runner.terminate_all()
    (tmp_path / "log").write_text("")
    runner = CommandRunner(fake_npu_smi(tmp_path, wait_for_ecc=30), 20, 8, priority_slots=1)
    runner.not_after = time.monotonic() + 60
    source = NpuSmiSource(runner, intervals={"ecc": 300.0}, quick_pass=True, identity_cache=cache)
    try:
        source.poll("npu-smi")
        source.poll("npu-smi:ecc")
        log = (tmp_path / "log").read_text().splitlines()
        assert "list" not in log, log
        first_ecc = min(index for index, line in enumerate(log) if line.startswith("ecc"))
        assert first_ecc < log.index("table end"), log
        assert sorted(line for line in log if line.startswith("ecc")) == ["ecc {}".format(n) for n in range(8)]
        assert source.statuses(time.time())["npu-smi:ecc"].ok
    finally:
        runner.terminate_all()
