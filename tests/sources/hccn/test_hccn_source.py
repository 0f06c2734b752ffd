"""The hccn source end to end: a fake hccn_tool printing real captures feeds `npumon check --json`; a chip whose
calls block costs the others nothing; products without ports and hosts without the tool are unsupported."""

import dataclasses
import json
import os
import textwrap
import threading
import time
import tracemalloc

import pytest

from clocked_host import FakeClock
from hccn_captures import capture
from npumon.settings import parse_config
from npumon.sim.simulation import prepare_simulation, set_scenario
from npumon.sim.target import simulated_target
from npumon.sources.collection import SourceSet
from npumon.model import ChipSample
from npumon.sources.hccn.source import HccnSource, has_ports
from npumon.sources.runner import CommandResult, CommandRunner

# -i <phy> -<cmd> -g -> the capture it prints (phy 0); phys 1 and 2 differ where a capture exists for them
ANSWERS = {
    "-link": "link_up_mc-faultdiag-doc.txt",
    "-link_stat": "link_stat_with-link-down-count_hccl-doc.txt",
    "-net_health": "net_health_socket-failed_910a_faultdiag-test.txt",
    "-speed": "speed_inline-quote_thirdparty-note.txt",
    "-bandwidth": "a5_bandwidth_950-doc.txt",
    "-stat": "stat_elided_mc-faultdiag-doc.txt",
    "-optical": "optical_4lane_qsfp_910a_faultdiag-test.txt",
    "-ip": "ip_910a_faultdiag-test.txt",
    "-ip.1": "ip_dev1_910a_faultdiag-test.txt",
}
# A shell script, not Python: `check --full` calls it about a hundred times, and a Python start is 50 ms of CPU.
FAKE_TOOL = textwrap.dedent("""\
    #!/bin/sh
    if [ $# -ne 4 ] || [ "$1" != -i ] || [ "$4" != -g ]; then
        echo "Get invalid major cmd." >&2; exit 3
    fi
    phy=$2 command=$3
    case "$command.$phy" in
        -ip.2) echo "Get ipconf failed, because no ip was preset there!" >&2; exit 13 ;;
        -gateway.*) echo "Get gateway failed, because no gateway was preset there!" >&2; exit 2 ;;
        -netdetect.*) echo "netdetect addr: 0.0.0.0"; exit 0 ;;
    esac
    answer="${0%/*}/answers/$command"
    [ -f "$answer.$phy" ] && answer="$answer.$phy"
    [ -f "$answer" ] || { echo "Get invalid major cmd." >&2; exit 3; }
    exec cat "$answer"
    """)


def fake_hccn_tool(directory):
    answers = directory / "answers"
    answers.mkdir()
    for name, fixture in ANSWERS.items():
        (answers / name).write_text(capture(fixture))
    path = directory / "hccn_tool"
    path.write_text(FAKE_TOOL)
    path.chmod(0o755)
    return path


@pytest.mark.integration
def test_check_json_reports_the_captures_values_in_the_right_chips_network(tmp_path, cli):
    tool = fake_hccn_tool(tmp_path)
    config = tmp_path / "npumon.yaml"
    config.write_text("network: {{hccn_tool: {}}}\nprobe: {{enabled: false}}\n".format(tool))
    # npumon check through main() in-process; the fake hccn_tool runs as a real program per call
    proc = cli("check", "--simulate", "--full", "--json", "--timeout", "60", "--config", str(config))
    document = json.loads(proc.stdout)
    assert document["sources"]["hccn"]["ok"] is True, document["sources"]["hccn"]
    chips = {(chip["npu"], chip["chip"]): chip for chip in document["chips"]}
    network = chips[(0, 0)]["network"]
    assert network["phy_id"] == 0
    assert network["link_status"] == "UP"
    assert (network["link_up_count"], network["link_down_count"]) == (2, 1)
    assert [(change["time"][:19], change["state"]) for change in network["link_changes"]] == [
        ("2025-10-05T10:13:51", "UP"), ("2025-10-05T10:13:50", "DOWN"), ("2025-10-05T10:13:35", "UP")]
    assert network["net_health"] == "Socket failed"
    assert network["speed_mbps"] == 200000
    assert network["bandwidth_rx_bytes_per_second"] == 266.84e6 and network["bandwidth_tx_bytes_per_second"] == 0
    assert network["optical_present"] is False
    assert network["rx_power_mw"] == [1.0189, 0.0054, 0.9907, 1.0213]
    assert network["tx_power_mw"] == [4.4035, 1.3968, 1.4140, 1.4988]
    assert network["counters"]["nic_rx_all_oct_num"] == 482237805
    assert network["ip_addresses"] == [{"address": "192.161.200.10", "netmask": "255.255.255.0"}]
    assert (network["gateway"], network["gateway_configured"], network["netdetect_address"]) == (None, False, None)
    assert chips[(1, 0)]["network"]["ip_addresses"] == [{"address": "192.161.201.10", "netmask": "255.255.255.0"}]
    assert chips[(2, 0)]["network"]["ip_addresses"] == []
    fired = {(finding["rule"], finding["subject"]) for finding in document["findings"]}
    # "Socket failed" (the older spelling) is a failed net health; the capture's lane 0 TX is above its module's
    # high threshold and lane 1 RX below the low one; npu2 has no IP while the others have one
    assert ("network-health-failed", "npu0/chip0") in fired
    assert ("network-optical-out-of-range", "npu0/chip0") in fired
    assert ("network-ip-missing", "npu2/chip0") in fired and ("network-ip-missing", "npu0/chip0") not in fired
    assert ("network-link-down", "npu0/chip0") not in fired
    # the NET column of the table
    table = cli("check", "--simulate", "--full", "--timeout", "60", "--config", str(config)).stdout
    rows = [line.split() for line in table.splitlines() if line.startswith(("NPU  CHIP", "0  "))]
    assert rows[0][-2:] == ["NET", "PROBE"] and rows[1][-4:] == ["UP", "Socket", "failed", "-"]


def collection_for(tmp_path, scenario, config_text=""):
    sim = prepare_simulation(str(tmp_path / "sim"), scenario, time_scale=0, latency_scale=0)
    config = parse_config("probe: {enabled: false}\n" + config_text)
    return SourceSet(config, simulated_target(sim))


def test_a_chip_whose_calls_block_delays_neither_the_other_chips_nor_the_main_table(tmp_path):
    collection = collection_for(tmp_path, "network-not-ready", "network: {timeout_seconds: 1.5}\n")
    try:
        collection.poll("npu-smi")
        durations = {}

        def timed(tier):
            began = time.monotonic()
            collection.poll(tier)
            durations[tier] = time.monotonic() - began

        network = threading.Thread(target=timed, args=("hccn",))
        network.start()
        time.sleep(0.2)  # the blocked chip's call is running now
        timed("npu-smi")  # the main table meanwhile
        network.join()
        snapshot = collection.snapshot()
        assert durations["npu-smi"] < 1.0, durations  # it did not wait for the blocked hccn_tool call
        assert durations["hccn"] < 1.5 + 1.0, durations  # the blocked call ends at its deadline
        links = [chip.extra["network"]["link_status"] for chip in snapshot.chips]
        assert links == ["UP", "UP", None, "UP", "UP", "UP", "UP", "UP"]
        status = snapshot.sources["hccn"]
        assert status.ok and status.degraded and "npu2/chip0 (phy 2) -link_stat: timed out" in status.error
        assert "may not be ready" in status.error
        # next polls leave the not-ready chip alone instead of waiting out its deadline again
        for tier in ("hccn", "hccn:optical"):
            timed(tier)
            assert durations[tier] < 1.0, durations
        assert "npu2/chip0 (phy 2): not ready, left alone" in collection.snapshot().sources["hccn"].error
    finally:
        collection.close()


def test_a_chip_stays_not_ready_through_its_retry_until_it_answers_again(tmp_path):
    collection = collection_for(tmp_path, "network-not-ready",
                                "network: {timeout_seconds: 0.5, not_ready_retry_seconds: 0}\n")
    try:
        collection.poll("npu-smi")

        def not_ready():
            return [chip.extra["network"]["not_ready"] for chip in collection.snapshot().chips]

        collection.poll("hccn")
        assert not_ready() == [False, False, True, False, False, False, False, False]
        retry = threading.Thread(target=collection.poll, args=("hccn",))  # no rest: it asks the chip again
        retry.start()
        time.sleep(0.2)  # the retry's call is running now, and the chip is still not known to be ready
        assert not_ready()[2] is True
        retry.join()
        set_scenario(str(tmp_path / "sim"), "healthy")
        collection.poll("hccn")
        assert not any(not_ready())
    finally:
        collection.close()


@pytest.mark.parametrize("product", ["atlas-300i-duo", "atlas-200i-a2"])
def test_products_without_ports_are_unsupported_not_failing(tmp_path, product):
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy", product=product, time_scale=0, latency_scale=0)
    collection = SourceSet(parse_config("probe: {enabled: false}\n"),
                           simulated_target(sim))
    try:
        snapshot = collection.collect_once()
    finally:
        collection.close()
    status = snapshot.sources["hccn"]
    assert status.ok and status.unsupported and "no chip of this product has an NPU network port" in status.error
    assert snapshot.chips and all(chip.extra["network"] is None for chip in snapshot.chips)


def test_a_host_without_hccn_tool_is_unsupported_and_an_unreachable_one_fails(tmp_path):
    collection = collection_for(tmp_path, "healthy", "network: {{hccn_tool: {}}}\n".format(tmp_path / "absent"))
    try:
        snapshot = collection.collect_once()
    finally:
        collection.close()
    status = snapshot.sources["hccn"]
    assert status.ok and status.unsupported and "no hccn_tool at" in status.error
    locked = tmp_path / "tools"
    locked.mkdir()
    fake_hccn_tool(locked)
    locked.chmod(0)
    try:
        if os.access(str(locked), os.X_OK):
            pytest.skip("running as root: a mode-0 directory does not keep root out")
        settings = parse_config("network: {{hccn_tool: {}}}\n".format(locked / "hccn_tool")).network
        source = HccnSource(settings, [settings.hccn_tool], None, 120.0)
        source.poll("hccn", [])
        assert "cannot reach" in source.statuses(time.time())["hccn"].error
    finally:
        locked.chmod(0o755)


def test_the_physical_id_comes_from_info_m_when_the_chips_carry_none(tmp_path):
    collection = collection_for(tmp_path, "healthy")
    try:
        collection.poll("npu-smi")
        # a quick pass on an A2 without the identity file: the table gives neither id
        chips = [dataclasses.replace(chip, device_id=None, phy_id=None) for chip in collection.snapshot().chips]
        source = next(source for source in collection.sources if source.name == "hccn")
        source.poll("hccn", chips)
        networks = source.networks(time.time(), chips)
    finally:
        collection.close()
    assert [networks[chip.key]["phy_id"] for chip in chips] == list(range(8))
    assert all(networks[chip.key]["link_status"] == "UP" for chip in chips)


def test_a_tier_waiting_for_npu_smi_s_chips_is_waiting_within_its_grace_then_down(tmp_path):
    clock = FakeClock(1000.0)
    asked, answer = threading.Event(), threading.Event()

    def spawn(argv, env, timeout_seconds):  # hccn_tool answers once the test lets it
        asked.set()
        answer.wait(10)
        return CommandResult(argv, 0, capture("link_up_mc-faultdiag-doc.txt"), "", 0.1)

    settings = parse_config("").network
    source = HccnSource(settings, ["hccn_tool"], CommandRunner(["npu-smi"], 5, spawn=spawn), 120.0, clock=clock,
                        check_program=False, wait_grace=45.0)
    for elapsed in (0, 20, 45):  # npu-smi has listed no chips yet: waiting, not down, however often it asks
        clock.now = 1000.0 + elapsed
        for tier in ("hccn", "hccn:stat"):
            assert source.poll(tier, []) == 1.0
            status = source.statuses(clock.now)[tier]
            assert status.waiting_on == "npu-smi" and status.error == "no chips yet: npu-smi has not listed them"
            assert not status.failing
    # the chips come: while the first poll's calls run (or wait for a slot) the tier is not polled yet
    chips = [ChipSample(npu=0, chip=0, name="910B3", phy_id=0)]
    polling = threading.Thread(target=source.poll, args=("hccn", chips))
    polling.start()
    try:
        assert asked.wait(10)
        status = source.statuses(clock.now)["hccn"]
        assert status.not_polled_yet and not status.failing
    finally:
        answer.set()
        polling.join(10)
    assert source.statuses(clock.now)["hccn"].last_success == 1045.0
    # a tier that is still without chips past the grace fails on its own
    clock.now = 1046.0
    source.poll("hccn:stat", [])
    status = source.statuses(clock.now)["hccn:stat"]
    assert status.failing and status.waiting_on is None
    assert status.error == "no chips yet: npu-smi has not listed them for 46s (grace 45s)"


def test_the_wait_grace_is_three_of_npu_smi_s_table_polls_each_at_least_its_deadline(tmp_path):
    for config, grace in (("", 45.0), ("poll: {table_seconds: 30}\n", 90.0), ("npu_smi_timeout_seconds: 20\n", 60.0)):
        collection = collection_for(tmp_path / str(grace), "healthy", config)
        try:
            assert next(source for source in collection.sources if source.name == "hccn").wait_grace == grace
        finally:
            collection.close()


def test_has_ports():
    assert has_ports("910B3") and has_ports("Ascend910") and has_ports("910A")
    assert not has_ports("310P3") and not has_ports("310B4") and not has_ports(None)


@pytest.mark.slow
@pytest.mark.integration
def test_the_daemon_serves_the_network_on_metrics_and_status(tmp_path):
    from daemon_harness import DaemonProcess, kill_leftovers, sample, wait_until

    config = tmp_path / "npumon.yaml"
    config.write_text("state_dir: {}\nprobe: {{enabled: false}}\nexporter: {{npu_exporter_compat: true}}\n"
                      "network: {{link_seconds: 2, stat_seconds: 2, bandwidth_seconds: 0, optical_seconds: 0, "
                      "config_seconds: 0}}\n".format(tmp_path / "state"))
    sim_state = str(tmp_path / "sim")
    daemon = DaemonProcess(["--config", str(config), "--simulate=link-down", "--sim-state", sim_state,
                            "--listen", "127.0.0.1:0"])
    try:
        daemon.wait_serving()
        # Both chips read: at 2 s a tier that cannot ask every chip within its interval (a slow machine, two
        # call slots) leaves some out of a poll and reaches them at the next, so one chip's series comes first.
        text = wait_until(lambda: (lambda text: text if all(
            sample(text, "npumon_chip_network_link_up", npu=npu, chip="0") is not None for npu in ("0", "5"))
            else None)(daemon.get("/metrics").text), timeout=30, what="the network tier's polls of npu0 and npu5")
        assert sample(text, "npumon_chip_network_link_up", npu="5", chip="0") == 0
        assert sample(text, "npumon_chip_network_link_up", npu="0", chip="0") == 1
        assert sample(text, "npumon_source_up", source="hccn") == 1
        status = daemon.get("/status").json()
        assert status["chips"][5]["network"]["link_status"] == "DOWN"
        assert ("network-link-down", "npu5/chip0") in {(f["rule"], f["subject"]) for f in status["findings"]}
        assert "hccn:optical" not in status["sources"]  # a tier at 0 s is off
    finally:
        daemon.close()
        kill_leftovers(sim_state)


# -- memory: one answer at a time, binary refused unparsed ------------------------------------------------

ANSWER_BYTES = 4 * 1024 * 1024 - 1


class BigAnswers:
    """A spawn in place of hccn_tool (the runner's seam): every call answers ANSWER_BYTES of fresh output,
    decoded as the runner decodes what it read (the bytes and the text both held for a moment)."""

    def __init__(self, make, encoding="utf-8"):
        self.make, self.encoding = make, encoding
        self.calls = []

    def __call__(self, argv, env, timeout_seconds):
        self.calls.append(argv[-2])
        return CommandResult(list(argv), 0, self.make().decode(self.encoding, "replace"), "", 0.01)


def traced_poll(answers, tier):
    settings = parse_config("").network
    source = HccnSource(settings, ["hccn_tool"], CommandRunner(["npu-smi"], 10, spawn=answers), 120.0,
                        check_program=False)
    tracemalloc.start()
    try:
        source.poll(tier, [ChipSample(0, 0, name="910B3", phy_id=0)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return source.statuses(time.time())[tier], peak


def test_binary_output_fails_with_one_line_and_is_never_parsed():
    status, peak = traced_poll(BigAnswers(lambda: os.urandom(ANSWER_BYTES), "latin-1"), "hccn:stat")
    assert not status.ok and status.error.endswith("-stat: binary output (not text): not parsed")
    assert peak < 2.5 * ANSWER_BYTES, "peak {:.1f} x the answer".format(peak / ANSWER_BYTES)


@pytest.mark.parametrize("line_bytes", [100, 2000])
def test_each_answer_is_parsed_and_dropped_before_the_next_call(line_bytes):
    # plausible text: more lines than any answer (100-byte lines) or fewer, longer ones (2000 bytes)
    line = b"link status: UP".ljust(line_bytes - 1) + b"\n"
    answers = BigAnswers(lambda: line * (ANSWER_BYTES // line_bytes))
    status, peak = traced_poll(answers, "hccn")
    assert answers.calls == ["-link_stat", "-net_health", "-link", "-speed"]
    assert "unreadable -link_stat" in status.error  # the answers are not -link_stat's, nor 4096 lines at most
    assert peak < 2.5 * ANSWER_BYTES, "peak {:.1f} x the answer".format(peak / ANSWER_BYTES)


MEMORY_CGROUP = "/sys/fs/cgroup/memory"  # cgroup v1; the unit's MemoryMax=256M as memory.limit_in_bytes


@pytest.fixture
def memory_group():
    """A cgroup v1 memory group limited to 256 MiB, removed after the test; skipped where none can be made."""
    path = os.path.join(MEMORY_CGROUP, "npumon-test-{}".format(os.getpid()))
    try:
        os.mkdir(path)
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as handle:
            handle.write(str(256 * 1024 * 1024))
    except OSError as exc:
        if os.path.isdir(path):
            os.rmdir(path)
        pytest.skip("no cgroup v1 memory group can be made here ({}: {}), so MemoryMax=256M cannot be held for "
                    "real; the hccn memory tests above measure one answer with tracemalloc".format(
                        path, exc.strerror))
    yield path
    for _ in range(50):  # the killed daemon leaves the group a moment later
        try:
            os.rmdir(path)
            break
        except OSError:
            time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.integration
def test_the_a3_daemon_fed_4_mib_of_binary_on_every_hccn_call_keeps_to_half_of_memory_max(tmp_path, memory_group):
    from daemon_harness import DaemonProcess, kill_leftovers, wait_until

    tool = tmp_path / "hccn_tool"
    tool.write_text("#!/bin/sh\nexec head -c {} /dev/urandom\n".format(ANSWER_BYTES))
    tool.chmod(0o755)
    config = tmp_path / "npumon.yaml"
    config.write_text("state_dir: {}\nprobe: {{enabled: false}}\nnetwork: {{hccn_tool: {}, link_seconds: 2, "
                      "stat_seconds: 2, bandwidth_seconds: 2, optical_seconds: 2, config_seconds: 2}}\n".format(
                          tmp_path / "state", tool))
    sim_state = str(tmp_path / "sim")
    daemon = DaemonProcess(["--config", str(config), "--simulate=healthy", "--sim-product", "atlas-a3",
                            "--sim-state", sim_state, "--listen", "127.0.0.1:0"], env={"NPUMON_SIM_IN_PROCESS": "0"})
    try:
        with open(os.path.join(memory_group, "cgroup.procs"), "w") as handle:
            handle.write(str(daemon.proc.pid))  # before it starts its threads and its first calls
        daemon.wait_serving(60)
        error = wait_until(lambda: (lambda error: error if "-stat:" in (error or "") else None)(
            daemon.get("/status").json()["sources"].get("hccn:stat", {}).get("error")),
            timeout=60, what="the first hccn:stat answer")
        assert error.endswith("-stat: binary output (not text): not parsed"), error
        answered = 0
        for _ in range(15):  # 30 s: about 15 polls of every network tier, 16 chips each
            answered += daemon.get("/metrics", timeout=10).status_code == 200
            time.sleep(2.0)
        assert answered == 15 and daemon.proc.poll() is None
        with open(os.path.join(memory_group, "memory.max_usage_in_bytes")) as handle:
            peak = int(handle.read())
        assert peak < 128 * 1024 * 1024, "the daemon's group peaked at {:.0f} MiB".format(peak / 2 ** 20)
    finally:
        daemon.close()
        kill_leftovers(sim_state)


# -- news for the rules: Outcome.changed ---------------------------------------------------------------------

class StatAnswers:
    """A spawn in place of hccn_tool answering `-stat` with the counters the test sets."""

    def __init__(self):
        self.counters = {"roce_tx_all_pkt_num": 100, "roce_rx_all_pkt_num": 90, "roce_rx_err_pkt_num": 0}

    def __call__(self, argv, env, timeout_seconds):
        text = "packet statistics:\n" + "".join("{}:{}\n".format(k, v) for k, v in self.counters.items())
        return CommandResult(list(argv), 0, text, "", 0.01)


def test_a_stat_poll_is_news_for_the_rules_when_a_fault_counter_moved_not_traffic():
    answers = StatAnswers()
    source = HccnSource(parse_config("").network, ["hccn_tool"], CommandRunner(["npu-smi"], 10, spawn=answers),
                        120.0, check_program=False)
    chips = [ChipSample(0, 0, name="910B3", phy_id=0)]
    source.poll("hccn:stat", chips)
    assert source.recorder.take_news("hccn:stat") == (True, True)  # the first answer
    answers.counters.update(roce_tx_all_pkt_num=5000, roce_rx_all_pkt_num=4000)  # traffic only
    source.poll("hccn:stat", chips)
    assert source.recorder.take_news("hccn:stat") == (False, False)
    answers.counters.update(roce_rx_err_pkt_num=3)
    source.poll("hccn:stat", chips)
    assert source.recorder.take_news("hccn:stat") == (False, True)


class LinkAnswers:
    """A spawn in place of hccn_tool answering the link tier's commands for the port state the test sets, in
    the current driver's wording (captures: link_stat_with-link-down-count_hccl-doc.txt)."""

    def __init__(self, down_count_line=True):
        self.link, self.speed, self.ups, self.downs = "UP", 200000, 1, 0
        self.down_count_line = down_count_line
        self.calls = []

    def __call__(self, argv, env, timeout_seconds):
        command = argv[-2]
        self.calls.append(command)
        text = {"-link": "link status: {}\n".format(self.link),
                "-speed": "Speed: {} Mb/s\n".format(self.speed) if self.link == "UP" else "Speed: Unknown!\n",
                "-net_health": "net health status: Success\n",
                "-link_stat": "[devid 0]current time        : Wed Dec  2 10:00:00 2026\n"
                              "[devid 0]link up count       : {}\n".format(self.ups)
                              + ("[devid 0]link down count     : {}\n".format(self.downs) if self.down_count_line
                                 else "") + "[devid 0]link change records :\n"}[command]
        return CommandResult(list(argv), 0, text, "", 0.01)


def link_poll(source, answers):
    answers.calls.clear()
    source.poll("hccn", [ChipSample(0, 0, name="910B3", phy_id=0)])
    network = source.networks(time.time(), [ChipSample(0, 0, name="910B3", phy_id=0)])[(0, 0)]
    return sorted(answers.calls), network["link_status"], network["speed_mbps"]


def test_link_and_speed_are_asked_again_only_when_the_link_stat_counts_moved(monkeypatch):
    import npumon.sources.hccn.source as hccn_source

    answers = LinkAnswers()
    source = HccnSource(parse_config("").network, ["hccn_tool"], CommandRunner(["npu-smi"], 10, spawn=answers),
                        120.0, check_program=False)
    every = sorted(["-link_stat", "-net_health", "-link", "-speed"])
    assert link_poll(source, answers) == (every, "UP", 200000)
    assert source.recorder.take_news("hccn")[1] is True
    assert link_poll(source, answers) == (["-link_stat", "-net_health"], "UP", 200000)  # confirmed, not asked
    assert source.recorder.take_news("hccn")[1] is False  # nothing new for the rules either
    answers.link, answers.downs = "DOWN", 1
    assert link_poll(source, answers) == (every, "DOWN", None)
    assert link_poll(source, answers) == (["-link_stat", "-net_health"], "DOWN", None)
    answers.link, answers.ups, answers.speed = "UP", 2, 100000  # back up, trained slower
    assert link_poll(source, answers) == (every, "UP", 100000)
    monkeypatch.setattr(hccn_source, "LINK_RECHECK_SECONDS", 0.0)  # at least every LINK_RECHECK_SECONDS anyway
    assert link_poll(source, answers) == (every, "UP", 100000)


def test_without_a_down_count_the_link_is_asked_every_poll():
    answers = LinkAnswers(down_count_line=False)  # older drivers: a link going down moves no count
    source = HccnSource(parse_config("").network, ["hccn_tool"], CommandRunner(["npu-smi"], 10, spawn=answers),
                        120.0, check_program=False)
    link_poll(source, answers)
    answers.link = "DOWN"
    assert link_poll(source, answers) == (sorted(["-link_stat", "-net_health", "-link", "-speed"]), "DOWN", None)
