"""Every built-in rule fires on a Snapshot built to trigger it, and all stay quiet on a healthy host."""

import dataclasses

import pytest

from npumon.model import (MIB, ChipSample, DeviceFile, HostSample, NumaNode, PcieLink, ProbeSample, ProcessSample,
                          Snapshot, SourceStatus)
from npumon.rules import facts as facts_module
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules

CHIPS = 8
HBM_TOTAL = 65536 * MIB
SOURCES = ("npu-smi", "npu-smi:usages", "npu-smi:health", "npu-smi:ecc", "npu-smi:board", "host")


@pytest.fixture(autouse=True)
def compatible_versions(monkeypatch):
    """Pin the version check so these tests do not depend on the version files."""
    monkeypatch.setattr(facts_module, "_check_versions", lambda host: (True, "driver and firmware match"))


def healthy_chip(npu, index):
    return ChipSample(
        npu=npu, chip=index, name="910B3", health="OK", bus_id="0000:{:02x}:00.0".format(0xc1 + npu),
        temperature_celsius=55.0, power_watts=250.0, aicore_ratio=0.6, aivector_ratio=0.4,
        hbm_bandwidth_ratio=0.4, hbm_used_bytes=HBM_TOTAL // 2, hbm_total_bytes=HBM_TOTAL,
        memory_used_bytes=0, memory_total_bytes=0, ecc_single_bit_errors=0, ecc_double_bit_errors=0,
        ecc_isolated_pages=0, compatibility="OK",
        processes=[ProcessSample(npu=npu, chip=index, pid=4000 + npu, name="python3", memory_bytes=HBM_TOTAL // 2)],
        pcie=PcieLink(current_speed_gts=16.0, max_speed_gts=16.0, current_width=16, max_width=16),
        hccs=healthy_hccs(), hccs_bandwidth={"total_tx_gbps": 84.0, "total_rx_gbps": 84.0, "links": [
            {"link": n, "tx_gbps": 12.0, "rx_gbps": 12.0} for n in range(1, 8)]},
        sio={"tx_errors": 0, "rx_errors": 0},
    )


def healthy_hccs():
    """The healthy 910B baseline: 7 links at 4 lanes, 224 Gb/s, no errors."""
    return {"health": "OK", "first_error_lane": None, "links": [
        {"link": n, "lane_mode": 4, "lanes": "1111", "speed_gbps": 224, "tx_packets": 10 ** 9, "rx_packets": 10 ** 9,
         "retries": 0, "crc_errors": 0} for n in range(1, 8)]}


def first_links(health="OK", lane_mode=4, crc_per_poll=0, link3_gbps=12.0, sio_base=0, sio_per_poll=0):
    """Chip 0's links changed: link 3's lanes, CRC errors and bandwidth, the HCCS health, SIO errors (a count
    since driver load plus some per poll)."""
    def mutate(snapshot, elapsed):
        chip = snapshot.chips[0]
        chip.hccs = healthy_hccs()
        chip.hccs["health"] = health
        chip.hccs["first_error_lane"] = None if health == "OK" else 3
        link = chip.hccs["links"][2]
        link.update(lane_mode=lane_mode, speed_gbps=lane_mode * 56, crc_errors=crc_per_poll * int(elapsed // 15))
        chip.hccs_bandwidth["links"][2] = {"link": 3, "tx_gbps": link3_gbps, "rx_gbps": link3_gbps}
        count = sio_base + sio_per_poll * int(elapsed // 15)
        chip.sio = {"tx_errors": count, "rx_errors": count // 2}
    return mutate


def first_ub(status="full", link_status="linked", crc_per_poll=0, port5_mbps=12000):
    """Chip 0 as a 950 with UB ports 4-6 on UDie 0: port 5 in `status`, counting CRC errors per poll, carrying
    port5_mbps each way (its siblings 12000)."""
    def mutate(snapshot, elapsed):
        snapshot.chips[0].ub_bandwidth = {"ports": [
            {"udie": 0, "port": port, "tx_mbps": port5_mbps if port == 5 else 12000,
             "rx_mbps": port5_mbps if port == 5 else 12000} for port in (4, 5, 6)]}
        ports = []
        for port in (4, 5, 6):
            counters = {"crc_error_sum": 0, "retry_req_sum": 0, "tx_busi_flit_num": 10 ** 9}
            if port == 5:
                counters["crc_error_sum"] = crc_per_poll * int(elapsed // 15)
            ports.append({"udie": 0, "port": port, "status": status if port == 5 else "full", "counters": counters})
        snapshot.chips[0].ub = {"link_status": link_status, "ports": ports}
    return mutate


def healthy_snapshot(now):
    host = HostSample(
        hostname="atlas-01", cpu_ratio=0.3, cpu_count=192, load1=40.0, memory_total_bytes=1 << 40,
        memory_available_bytes=1 << 39, numa_balancing=0, max_map_count=1048576,
        numa_nodes=[NumaNode(0, cpu_ratio=0.35), NumaNode(1, cpu_ratio=0.25)],
        driver_version="24.1.rc2", firmware_version="7.5.0.1.129", cann_version="8.0.0",
        device_files=[DeviceFile(path, exists=True, accessible=True) for path in
                      ["/dev/davinci{}".format(i) for i in range(CHIPS)] +
                      ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]],
        serving_queue_depth=0.0,
    )
    return Snapshot(time=now, host=host, chips=[healthy_chip(npu, 0) for npu in range(CHIPS)],
                    sources={name: SourceStatus(ok=True, last_success=now) for name in SOURCES})


def run(mutate=None, seconds=0.0, step=15.0, one_shot=False):
    """Poll a healthy host (changed by `mutate(snapshot, elapsed)`) for `seconds`; the last findings."""
    rules, params = load_rules()
    engine = RuleEngine(rules, params, one_shot=one_shot)
    findings = []
    elapsed = 0.0
    while True:
        snapshot = healthy_snapshot(1_700_000_000.0 + elapsed)
        if mutate is not None:
            mutate(snapshot, elapsed)
        findings = engine.evaluate(snapshot)
        if elapsed >= seconds:
            return findings, snapshot
        elapsed += step


def first_chip(**values):
    def mutate(snapshot, elapsed):
        for name, value in values.items():
            setattr(snapshot.chips[0], name, value)
    return mutate


def host(**values):
    def mutate(snapshot, elapsed):
        for name, value in values.items():
            setattr(snapshot.host, name, value)
    return mutate


def device_file(path, **values):
    def mutate(snapshot, elapsed):
        snapshot.host.device_files = [dataclasses.replace(f, **values) if f.path == path else f
                                      for f in snapshot.host.device_files]
    return mutate


def rising_single_bit_errors(snapshot, elapsed):
    snapshot.chips[0].ecc_single_bit_errors = int(elapsed // 60)  # one a minute: 60 an hour


def versions_mismatch(monkeypatch):
    monkeypatch.setattr(facts_module, "_check_versions",
                        lambda host: (False, "firmware 7.1.0 is outside the driver's range [7.5.0,7.5.99]"))


def growing_queue_on_saturated_chips(snapshot, elapsed):
    snapshot.host.serving_queue_depth = 5.0 + elapsed / 15.0
    for chip in snapshot.chips:
        chip.aicore_ratio = 0.95


def serving(**figures):
    """The serving source's figures (sources/serving) on the host, the others unknown."""
    def mutate(snapshot, elapsed):
        snapshot.host.extra["serving"] = dict(figures)
    return mutate


def small_batches_on_idle_chips(snapshot, elapsed):
    """Requests wait while vLLM runs 4 at a time and every chip idles."""
    serving(engine="vllm", batch_size=4.0, batch_setting="vLLM's --max-num-seqs")(snapshot, elapsed)
    snapshot.host.serving_queue_depth = 40.0
    for chip in snapshot.chips:
        chip.aicore_ratio = 0.2


def half_the_chips_lagging(snapshot, elapsed):
    for chip in snapshot.chips[:CHIPS // 2]:
        chip.aicore_ratio = 0.9
    for chip in snapshot.chips[CHIPS // 2:]:
        chip.aicore_ratio = 0.15


def leaking_hbm(snapshot, elapsed):
    # +10% of HBM an hour, same process throughout
    snapshot.chips[0].hbm_used_bytes = int(HBM_TOTAL * (0.4 + 0.1 * elapsed / 3600.0))


def ecc_source_down(snapshot, elapsed):
    snapshot.sources["npu-smi:ecc"] = SourceStatus(
        ok=False, error="timed out after 10 s", last_success=snapshot.time - 30.0 - elapsed)


def starved_chip(snapshot, elapsed):
    snapshot.chips[0].aicore_ratio = 0.12
    snapshot.host.serving_queue_depth = 12.0


def healthy_network(**values):
    """A chip's network object (sources/hccn) as a healthy port's."""
    network = {"phy_id": 0, "link_status": "UP", "link_up_count": 1, "link_down_count": 0, "link_changes": [],
               "net_health": "Success", "speed_mbps": 200000, "normal_speed_mbps": 200000,
               "flap_window_seconds": 600.0, "link_changes_in_window": 0,
               "counters": {"roce_rx_err_pkt_num": 0, "roce_tx_err_pkt_num": 0},
               "optical_temperature_celsius": 45.0, "rx_power_mw": [1.0, 1.0, 1.0, 1.0],
               "tx_power_mw": [1.4, 1.4, 1.4, 1.4],
               "optical_thresholds": {"rx_power_low_mw": 0.1445, "rx_power_high_mw": 3.5481, "tx_power_low_mw": 0.2818,
                                      "tx_power_high_mw": 3.5481, "temp_low_celsius": 0.0, "temp_high_celsius": 70.0},
               "ip_addresses": [{"address": "192.161.200.10", "netmask": "255.255.255.0"}],
               "gateway": "192.161.200.1", "gateway_configured": True}
    network.update(values)
    return network


def first_port(**values):
    """Every chip with a healthy port, the first one's changed by `values` (a callable gets the elapsed time)."""
    def mutate(snapshot, elapsed):
        for chip in snapshot.chips:
            chip.extra["network"] = healthy_network()
        snapshot.chips[0].extra["network"] = healthy_network(**{
            name: value(elapsed) if callable(value) else value for name, value in values.items()})
    return mutate


def driver_fault(kind, on_host=False, attribution="unlisted"):
    """A fault of the kmsg source's book on chip 0 (or on the host: of a device the table does not list, or
    unattributed), and none elsewhere."""
    fault = {"fault_class": "heartbeat_lost", "kind": kind, "repair_action": "reset_npu", "level": "RestartNPU",
             "summary": "heartbeat lost", "device": 0, "bus": None, "code": "40F84E00", "count": 3,
             "suppressed": 0, "first_seen": 0.0, "last_seen": 0.0, "last_line": "Heartbeat lost!",
             "window_start": 0.0, "window_count": 3, "place": "device 0",
             "attribution": "device" if not on_host else attribution}

    def mutate(snapshot, elapsed):
        for chip in snapshot.chips:
            chip.extra["driver_faults"] = [fault] if chip.npu == 0 and not on_host else []
        snapshot.host.extra["driver_faults"] = [fault] if on_host else []
    return mutate


def job_fault(snapshot, elapsed):
    """The kmsg source's job fault: one TS exception on four chips of one process within a second."""
    snapshot.host.extra["job_faults"] = [{
        "job": "pid 31337", "fault_class": "ts_exception", "code": "B4060007", "level": "RestartBusiness",
        "summary": "the device's task scheduler (TS) raised an exception", "last_line": "receive ts exception msg",
        "chips": ["npu0/chip0", "npu1/chip0", "npu2/chip0", "npu3/chip0"], "lines": 12, "seconds": 1.0}]


def runtime_view(first=None, every=None):
    """Every chip with the ACL runtime's view of a healthy 910B3 (sources/probe/runtime_view.py), the first
    chip's changed by `first` and every chip's by `every`."""
    def values(chip, **changed):
        facts = {"device_count": CHIPS, "soc_name": "Ascend910B3", "driver_version": "24.1.rc2",
                 "hbm_free_bytes": chip.hbm_total_bytes - chip.hbm_used_bytes, "hbm_total_bytes": chip.hbm_total_bytes}
        facts.update(changed)
        return {"time": 0.0, "device_id": chip.npu, "values": {
            name: {"value": value, "source": "acl.x", "status": "ok"} for name, value in facts.items()}}

    def mutate(snapshot, elapsed):
        for chip in snapshot.chips:
            chip.extra["runtime"] = values(chip, **(every or {}))
        snapshot.chips[0].extra["runtime"] = values(snapshot.chips[0], **dict(every or {}, **(first or {})))
    return mutate


def repeating_fault(on_host=False):
    """A fault class logged 3 times within the repeat window, the kmsg source's counters beside it."""
    chips_and_host = driver_fault("device", on_host)

    def mutate(snapshot, elapsed):
        chips_and_host(snapshot, elapsed)
        for fault in snapshot.host.extra["driver_faults"] + snapshot.chips[0].extra["driver_faults"]:
            fault["repeats"] = 3
        snapshot.host.extra["kmsg"] = {"records": 3, "matched": 3, "lost": 0, "suppressed": 0,
                                       "repeat_window_seconds": 86400.0}
    return mutate


def chips_missing(snapshot, elapsed):
    snapshot.host.extra["chip_count"] = {"expected": CHIPS, "listed": CHIPS - 1, "pci_expected": CHIPS,
                                         "pci": CHIPS, "unlisted": ["0000:c8:00.0"], "missing": 1,
                                         "unreadable": 0, "problem": "npu-smi lists 7 of 8 chips"}


def activity(cpu_seconds_per_minute=50.0, blocked=()):
    """A chip's process_activity (sources/procs): its processes' CPU use and the ones stuck in D state."""
    return {"cpu_seconds_per_minute": cpu_seconds_per_minute,
            "blocked": [{"pid": pid, "name": "python3", "seconds": seconds} for pid, seconds in blocked]}


def hung_chip(snapshot, elapsed):
    """Chip 0's process holds it and nothing moves, while requests wait."""
    snapshot.chips[0].aicore_ratio = 0.0
    snapshot.chips[0].extra["process_activity"] = activity(0.2)
    snapshot.host.serving_queue_depth = 7.0


def process_in_dstate(snapshot, elapsed):
    snapshot.chips[0].aicore_ratio = 0.0
    snapshot.chips[0].extra["process_activity"] = activity(0.0, blocked=[(4000, 30.0 + elapsed)])


CHIP0 = "npu0/chip0"

# rule id -> (change to a healthy host, how long to poll, extra setup, subject expected)
CASES = {
    "temperature-critical": (first_chip(temperature_celsius=91.0), 0, None, CHIP0),
    "temperature-warning": (first_chip(temperature_celsius=82.0), 75, None, CHIP0),
    "health-warning": (first_chip(health="Warning", error_codes=["80CB8009"]), 0, None, CHIP0),
    "health-alarm": (first_chip(health="Alarm", error_codes=["A4025021", "8C03A000"]), 0, None, CHIP0),
    "health-critical": (first_chip(health="Critical"), 0, None, CHIP0),
    "health-unknown": (first_chip(health="UNKNOWN"), 135, None, CHIP0),
    "ecc-uncorrectable": (first_chip(ecc_double_bit_errors=2, ecc_isolated_pages=1), 0, None, CHIP0),
    "ecc-single-bit-rising": (rising_single_bit_errors, 3600, None, CHIP0),
    "board-incompatible": (first_chip(compatibility="NOK"), 0, None, CHIP0),
    "versions-incompatible": (None, 0, versions_mismatch, "host"),
    "device-files-missing": (device_file("/dev/devmm_svm", exists=False, accessible=False), 0, None, "host"),
    "device-files-inaccessible": (device_file("/dev/davinci_manager", accessible=False), 0, None, "host"),
    "pcie-degraded": (first_chip(pcie=PcieLink(8.0, 16.0, 16, 16)), 315, None, CHIP0),
    "numa-balancing-enabled": (host(numa_balancing=1), 0, None, "host"),
    "max-map-count-low": (host(max_map_count=65530), 0, None, "host"),
    # a host-wide cause: reported once, on the host, listing the starved chip
    "cpu-bottleneck": (starved_chip, 315, None, "host"),
    "memory-bound": (first_chip(hbm_bandwidth_ratio=0.95), 315, None, CHIP0),
    "serving-saturated": (growing_queue_on_saturated_chips, 615, None, "host"),
    "serving-small-batch": (small_batches_on_idle_chips, 315, None, "host"),
    "serving-slow-model-load": (serving(engine="triton", model_load_seconds=1250.0), 0, None, "host"),
    "load-imbalance": (half_the_chips_lagging, 615, None, "host"),
    "hbm-leak": (leaking_hbm, 3 * 3600, None, CHIP0),
    "source-down": (ecc_source_down, 75, None, "host"),
    "driver-hardware-fault": (driver_fault("hardware"), 0, None, CHIP0),
    "driver-device-fault": (driver_fault("device"), 0, None, CHIP0),
    "driver-transient-fault": (driver_fault("transient"), 0, None, CHIP0),
    "driver-host-hardware-fault": (driver_fault("hardware", on_host=True), 0, None, "host"),
    "driver-host-device-fault": (driver_fault("device", on_host=True), 0, None, "host"),
    "driver-host-transient-fault": (driver_fault("transient", on_host=True), 0, None, "host"),
    "driver-unattributed-fault": (driver_fault("hardware", on_host=True, attribution="none"), 0, None, "host"),
    "job-fault": (job_fault, 0, None, "host"),
    "probe-failed": (first_chip(probe=ProbeSample(state="failed", time=0.0, kind="acl", device_id=0,
                                                  failed_stage="memcpy", error_code=507053,
                                                  detail="acl.rt.memcpy returned 507053", action="Drain it.")),
                     0, None, CHIP0),
    "network-not-ready": (first_port(not_ready=True), 0, None, CHIP0),
    "network-link-down": (first_port(link_status="DOWN", speed_mbps=None), 0, None, CHIP0),
    "network-link-down-long": (first_port(link_status="DOWN", speed_mbps=None, link_down_seconds=61.0), 0, None,
                               CHIP0),
    "driver-fault-repeating": (repeating_fault(), 0, None, CHIP0),
    "driver-host-fault-repeating": (repeating_fault(on_host=True), 0, None, "host"),
    "chips-missing": (chips_missing, 0, None, "host"),
    "network-link-flapping": (first_port(link_changes_in_window=6), 0, None, CHIP0),
    "network-health-failed": (first_port(net_health="Socket failed"), 0, None, CHIP0),
    "network-roce-errors-rising": (first_port(counters=lambda elapsed: {"roce_rx_err_pkt_num": int(elapsed // 15)}),
                                   120, None, CHIP0),
    "network-pfc-storm": (first_port(counters=lambda elapsed: {"mac_rx_pfc_pkt_num": int(elapsed * 5000)}),
                          435, None, CHIP0),
    "network-optical-out-of-range": (first_port(rx_power_mw=[1.0, 0.05, 1.0, 1.0]), 135, None, CHIP0),
    "network-speed-low": (first_port(speed_mbps=100000), 135, None, CHIP0),
    "network-ip-missing": (first_port(ip_addresses=[]), 0, None, CHIP0),
    "network-gateway-missing": (first_port(gateway=None, gateway_configured=False), 0, None, CHIP0),
    "probe-slow": (first_chip(probe=ProbeSample(state="ok", time=0.0, kind="acl", device_id=0, first_run=False,
                                                duration_seconds=2.0, baseline_seconds=0.3)), 0, None, CHIP0),
    "runtime-devices-missing": (runtime_view(every={"device_count": CHIPS - 2}), 0, None, "host"),
    "runtime-soc-mismatch": (runtime_view(first={"soc_name": "Ascend310P3"}), 0, None, CHIP0),
    "runtime-hbm-held": (runtime_view(first={"hbm_free_bytes": HBM_TOTAL // 4}), 0, None, CHIP0),
    "runtime-driver-mismatch": (runtime_view(every={"driver_version": "23.0.7"}), 0, None, "host"),
    "chip-hung": (hung_chip, 315, None, CHIP0),
    "chip-dstate": (process_in_dstate, 255, None, CHIP0),
    # interconnect links (rules/links.py)
    "hccs-link-unhealthy": (first_links(health="NOK"), 0, None, CHIP0),
    "hccs-lanes-degraded": (first_links(lane_mode=2), 0, None, CHIP0),
    "hccs-errors-rising": (first_links(crc_per_poll=3), 120, None, CHIP0),
    "hccs-link-bandwidth-low": (first_links(link3_gbps=3.0), 315, None, CHIP0),
    "sio-crc-errors": (first_links(sio_base=12), 0, None, CHIP0),
    "sio-crc-errors-rising": (first_links(sio_per_poll=2), 120, None, CHIP0),
    "ub-port-down": (first_ub(status="down", link_status="partial"), 0, None, CHIP0),
    "ub-port-lanes-partial": (first_ub(status="partial_lanes"), 0, None, CHIP0),
    "ub-errors-rising": (first_ub(crc_per_poll=3), 120, None, CHIP0),
    "ub-port-bandwidth-low": (first_ub(port5_mbps=3000), 315, None, CHIP0),
}


def test_every_builtin_rule_has_a_case():
    rules, _ = load_rules()
    assert {rule.id for rule in rules} == set(CASES)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_builtin_rule_fires(rule_id, monkeypatch):
    mutate, seconds, setup, subject = CASES[rule_id]
    if setup is not None:
        setup(monkeypatch)
    findings, _ = run(mutate, seconds, step=60.0 if seconds > 3600 else 15.0)
    fired = [f for f in findings if f.rule == rule_id]
    assert [f.subject for f in fired] == [subject], [(f.rule, f.subject) for f in findings]
    finding = fired[0]
    assert finding.summary and "{" not in finding.summary and "{" not in finding.hint
    assert finding.hint, rule_id


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_builtin_rule_needs_its_duration(rule_id, monkeypatch):
    """Rules with `for:` or a window stay quiet when the condition has only just appeared."""
    rules, _ = load_rules()
    rule = next(r for r in rules if r.id == rule_id)
    mutate, seconds, setup, _ = CASES[rule_id]
    if setup is not None:
        setup(monkeypatch)
    findings, _ = run(mutate, 0)
    fired = any(f.rule == rule_id for f in findings)
    assert fired is (rule.for_seconds == 0 and rule.expr.window_seconds == 0)


def test_small_batches_are_the_one_recommendation_not_a_starving_host():
    """Requests wait and the chips idle: with small batches the engine's batch limit is the cause
    (serving-small-batch names its setting), with full batches or no batch figure the host (cpu-bottleneck)."""
    findings, _ = run(small_batches_on_idle_chips, 315)
    assert {f.rule for f in findings} == {"serving-small-batch"}
    assert "--max-num-seqs" in findings[0].hint and "40 requests wait" in findings[0].summary

    def full_batches(snapshot, elapsed):
        small_batches_on_idle_chips(snapshot, elapsed)
        snapshot.host.extra["serving"]["batch_size"] = 64.0

    def no_batch_figure(snapshot, elapsed):
        small_batches_on_idle_chips(snapshot, elapsed)
        snapshot.host.extra["serving"]["batch_size"] = None

    for mutate in (full_batches, no_batch_figure):
        findings, _ = run(mutate, 315)
        assert {f.rule for f in findings} == {"cpu-bottleneck"}


def test_busy_chips_or_an_empty_queue_are_no_small_batch_problem():
    def busy(snapshot, elapsed):
        small_batches_on_idle_chips(snapshot, elapsed)
        snapshot.chips[3].aicore_ratio = 0.7  # one chip has work: the batch is not what holds it back

    def nothing_waits(snapshot, elapsed):
        small_batches_on_idle_chips(snapshot, elapsed)
        snapshot.host.serving_queue_depth = 0.0

    for mutate in (busy, nothing_waits):
        findings, _ = run(mutate, 315)
        assert "serving-small-batch" not in {f.rule for f in findings}


def test_a_fast_model_load_is_quiet():
    findings, _ = run(serving(engine="triton", model_load_seconds=95.0), 0)
    assert findings == []


def test_check_mode_fires_condition_rules_at_once(monkeypatch):
    """`npumon check` has one sample: `for` is ignored, window rules cannot fire."""
    findings, _ = run(first_chip(hbm_bandwidth_ratio=0.95, temperature_celsius=82.0), one_shot=True)
    assert {f.rule for f in findings} == {"memory-bound", "temperature-warning"}


def test_healthy_host_is_quiet_over_hours():
    findings, _ = run(seconds=4 * 3600, step=60.0)
    assert findings == []


def test_healthy_ports_are_quiet_over_hours():
    findings, _ = run(first_port(), seconds=4 * 3600, step=60.0)
    assert findings == []


def test_sources_waiting_for_another_or_for_their_first_poll_raise_no_source_down():
    # `npumon run --simulate=slow`: the hccn tiers wait for npu-smi's chips, then their first polls wait for a slot
    def waiting(snapshot, elapsed):
        for tier in ("hccn", "hccn:stat", "hccn:optical", "hccn:config"):
            snapshot.sources[tier] = SourceStatus(ok=False, error="no chips yet: npu-smi has not listed them",
                                                  waiting_on="npu-smi")
        snapshot.sources["npu-smi:power"] = SourceStatus(ok=False, error="not polled yet")
    assert run(waiting, seconds=300)[0] == []

    def waited_too_long(snapshot, elapsed):  # past its grace hccn says so without waiting_on
        waiting(snapshot, elapsed)
        snapshot.sources["hccn"] = SourceStatus(ok=False, error="no chips yet: npu-smi has not listed them for 50s "
                                                               "(grace 45s)")
    findings, _ = run(waited_too_long, seconds=75)
    assert [(finding.rule, finding.summary) for finding in findings] == [("source-down", "1 source(s) failing: hccn")]


def test_healthy_ub_ports_are_quiet_over_hours():
    assert run(first_ub(), seconds=4 * 3600, step=60.0)[0] == []


def test_ub_bandwidth_names_the_slow_port_and_an_idle_chip_is_quiet():
    findings, _ = run(first_ub(status="partial_lanes", port5_mbps=3000), seconds=315)
    (low,) = [f for f in findings if f.rule == "ub-port-bandwidth-low"]
    assert low.summary == "UB port 0/5 (UDie/port) carries 6000 MB/s, 25% of its siblings' median 24000 MB/s"
    assert "partial ports: 0/5" in low.hint and "-u 0 -p 5 -time 100" in low.hint
    # every port near 0: below the floor, nothing to compare
    def idle(snapshot, elapsed):
        first_ub(port5_mbps=0)(snapshot, elapsed)
        for port in snapshot.chips[0].ub_bandwidth["ports"]:
            port["tx_mbps"] = port["rx_mbps"] = 0 if port["port"] == 5 else 100
    assert [f.rule for f in run(idle, seconds=315)[0]] == []


def test_ub_ports_a_chip_needs_no_link_on_raise_nothing():
    # a card alone: the driver marks its links not needed and leaves its ports unlinked
    findings, _ = run(first_ub(status="down", link_status="not_needed"))
    assert findings == []


def test_ub_findings_name_the_ports():
    findings, _ = run(first_ub(status="down", link_status="partial"))
    (down,) = [f for f in findings if f.rule == "ub-port-down"]
    assert down.summary.startswith("UB port(s) 0/5 (UDie/port) not linked; the chip's UB links are partial")
    assert down.repair_action == "inspect_hardware" and "HCCL_EXEC_TIMEOUT" in down.hint
    assert "hccn_tool -g -link -i n/a -u 0 -p 5 " in down.hint  # the test chips have no device_id
    findings, _ = run(first_ub(crc_per_poll=3), seconds=120)
    (rising,) = [f for f in findings if f.rule == "ub-errors-rising"]
    assert "port 0/5: 24 CRC errors, 0 retransmission requests" in rising.summary
    assert "-stat -i n/a -u 0 -p 5 (crc_error_sum" in rising.hint


def test_healthy_host_is_quiet_in_check_mode():
    assert run(one_shot=True)[0] == []


def test_health_alarm_hint_names_codes_and_information():
    findings, _ = run(first_chip(health="Alarm", error_codes=["A4025021", "8C03A000"],
                                 error_information=["HBM multi-bit ECC error", "temperature sensor fault"]))
    finding = next(f for f in findings if f.rule == "health-alarm")
    assert "A4025021, 8C03A000" in finding.summary
    assert "HBM multi-bit ECC error; temperature sensor fault" in finding.hint
    assert "-i 0 -c 0" in finding.hint


def test_cpu_bottleneck_hint_shows_host_and_numa_figures():
    findings, _ = run(starved_chip, 315)
    finding = next(f for f in findings if f.rule == "cpu-bottleneck")
    assert "12%" in finding.summary and "queue 12" in finding.summary
    assert "Host CPU 30%" in finding.hint and "busiest node 35%" in finding.hint
    assert finding.subject == "host" and finding.chips == [CHIP0]


def test_idle_server_is_not_a_cpu_bottleneck():
    def idle(snapshot, elapsed):
        for chip in snapshot.chips:
            chip.aicore_ratio = 0.0

    findings, _ = run(idle, 600)
    assert findings == []


def test_idle_spare_chips_are_not_an_imbalance():
    def spares_without_processes(snapshot, elapsed):
        for chip in snapshot.chips[CHIPS // 2:]:
            chip.aicore_ratio = 0.0
            chip.processes = []

    findings, _ = run(spares_without_processes, 900)
    assert findings == []


def test_temperature_hysteresis_in_the_builtin_rules():
    rules, params = load_rules()
    engine = RuleEngine(rules, params)
    temperatures = [86, 84, 83, 82.5, 81.9]
    active = []
    for step, temperature in enumerate(temperatures):
        snapshot = healthy_snapshot(1_700_000_000.0 + 15 * step)
        snapshot.chips[0].temperature_celsius = float(temperature)
        active.append("temperature-critical" in {f.rule for f in engine.evaluate(snapshot)})
    # fires at 86, holds down to 82 (85 - 3 hysteresis), resolves below it
    assert active == [True, True, True, True, False]


def test_thresholds_change_builtin_rules():
    rules, params = load_rules(params={"temperature_critical_celsius": 95})
    snapshot = healthy_snapshot(0.0)
    snapshot.chips[0].temperature_celsius = 91.0
    findings = RuleEngine(rules, params, one_shot=True).evaluate(snapshot)
    assert "temperature-critical" not in {f.rule for f in findings}
    assert "temperature-warning" in {f.rule for f in findings}
