"""hccn-tool-sim: an hccn_tool-compatible executable that answers from a simulation's state directory.

    NPUMON_SIM_STATE=<dir> python -m npumon.sim.hccn -i 0 -link -g

It accepts the 910B/A3 tool's grammar (`-i <phy id> -<cmd> -g`, fixed option order) for the commands npumon
reads (-link, -link_stat, -net_health, -speed, -bandwidth, -stat, -optical, -ip, -gateway, -netdetect) and
prints the formats of the driver's source and the real captures (shared/reference/hccn/FORMATS.md,
tests/fixtures/hccn/) byte for byte, errors on the streams and with the exit codes the tool uses. The
scenario's `network_*` chip values (sim/values.py) drive it; `network_hccn: blocks` is a chip that is not
ready: the tool polls its health for 300 s, then fails with "Get device health status failed!".

How long a call takes (scale 1; times the simulation's latency scale, jitter as latency.py): START_SECONDS
(estimate: one process start and one DSMI open; no public timing), plus 1 s for -bandwidth (its default
1000 ms sampling window, FORMATS.md section 2) and OPTICAL_SECONDS for -optical (estimate: the module's
registers come over I2C).
"""

import math
import os
import random
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .latency import seconds_since_start
from .products import FAMILY_310B, FAMILY_310P, get_product
from .state import STATE_ENV, SimStateError, read_state_shared, scenario_time
from .values import network_values_at

MODULE = "npumon.sim.hccn"
START_SECONDS = 0.15
BANDWIDTH_SECONDS = 1.0
OPTICAL_SECONDS = 0.3
NOT_READY_SECONDS = 300.0  # MAX_HEALTH_CHECK_CNT (5 * 60) polls, sleep(1) each (tool.c:1793-1820)
JITTER = 0.2
EXIT_SIMULATOR_MISUSE = 2
HISTORY_SECONDS = 3600.0  # a flapping link has flapped at its rate for this long before the scenario starts
MAX_RECORDS = 10  # LINK_STAT_MAX_IDX
BOOT_UPTIME_SECONDS = 86400.0  # the link came up at boot, a day before the scenario starts

HINT = "Enter [ hccn_tool -h ] for more details.\n"
NOT_SUPPORTED = "The command is not supported on this product.\n"
EXIT_NOT_SUPPORTED = 0x300D & 0xFF
Answer = Tuple[str, str, int]  # stdout, stderr, exit status


@dataclass
class HccnCall:
    """One simulated hccn_tool call: how long it takes, whether it blocks, and `answer()`."""

    args: List[str]
    state: Dict
    t: float
    now: float  # wall time of the call
    latency_seconds: float = 0.0

    @property
    def blocks(self) -> bool:
        chip = self._chip()
        return chip is not None and network_values_at(self.state["scenario"]["chips"], chip, self.t)["hccn"] == "blocks"

    @property
    def wait_seconds(self) -> float:
        return self.latency_seconds + (NOT_READY_SECONDS if self.blocks else 0.0)

    def _chip(self) -> Optional[int]:
        """The logical device id the -i argument names (phy id -> logic id), or None."""
        if len(self.args) < 2 or self.args[0] != "-i" or not self.args[1].isdigit() or len(self.args[1]) > 2:
            return None
        phy = int(self.args[1])
        for slot in get_product(self.state["product"]).slots():
            if slot.phy_id == phy:
                return slot.device_id
        return None

    def answer(self) -> Answer:
        if self.blocks:
            return "", "Get device health status failed!\n", 0x4003 & 0xFF
        return respond(self.args, self.state, self.t, self.now, self._chip())


def begin_call(args: Sequence[str], state_dir: Optional[str], now: float,
               rng: Optional[random.Random] = None) -> HccnCall:
    """Read the state and draw the call's latency. Raises SimStateError, OSError or ValueError for a missing or
    damaged simulation."""
    state = read_state_shared(state_dir)
    call = HccnCall(list(args), state, scenario_time(state, now), now)
    scale = state.get("latency_scale", 1.0) * state["scenario"].get("latency_scale", 1.0)
    if scale:
        call.latency_seconds = scale * call_seconds(args, rng or random.Random())
    return call


def call_seconds(args: Sequence[str], rng: random.Random) -> float:
    seconds = START_SECONDS
    if "-bandwidth" in args:
        seconds += BANDWIDTH_SECONDS
    if "-optical" in args:
        seconds += OPTICAL_SECONDS
    return seconds * rng.uniform(1.0 - JITTER, 1.0 + JITTER)


# -- answering -------------------------------------------------------------------------------------------


def respond(args: List[str], state: Dict, t: float, now: float, device: Optional[int]) -> Answer:
    if not args or args[0] not in ("-i", "-a"):
        return "", ('Get invalid major cmd type. The valid major cmd type should be "-a" or "-i".\n' + HINT), 1
    if args[0] == "-a" or len(args) < 3:
        return "", "Get invalid major cmd number. Please check your input.\n", 2
    product = get_product(state["product"])
    if product.family in (FAMILY_310P, FAMILY_310B):
        return NOT_SUPPORTED, "", EXIT_NOT_SUPPORTED  # no RoCE port on these chips
    if device is None:
        return "", "Get invalid device id.\n", 4
    command = args[2]
    if command not in COMMANDS:
        return "", "Get invalid major cmd.\n" + HINT, 3
    if args[3:] != ["-g"]:
        return "[ hccn_tool -i devid {} ] needs the following parameters:\n".format(command), \
            "Get unknown option!\n", 3
    net = network_values_at(state["scenario"]["chips"], device, t)
    return COMMANDS[command](int(args[1]), net, t, now)


def _link(phy: int, net: Dict, t: float, now: float) -> Answer:
    return "link status: {}\n".format(net["link"]), "", 0


def _net_health(phy: int, net: Dict, t: float, now: float) -> Answer:
    return "net health status: {}\n".format(net["health"]), "", 0


def _asctime(when: float) -> str:
    return time.asctime(time.localtime(when))


def link_history(net: Dict, t: float, now: float) -> Tuple[int, int, List[Tuple[float, str]]]:
    """(up count, down count, records newest first as (wall time, "UP"|"DOWN"))."""
    events: List[Tuple[float, str]] = [(now - t - BOOT_UPTIME_SECONDS, "UP")]
    rate = max(0.0, float(net["link_flaps_per_hour"]))
    if rate:
        period = 3600.0 / rate
        flaps = int(math.floor((t + HISTORY_SECONDS) / period))
        for index in range(flaps):  # each flap: down, and up again 2 s later
            at = now - t - HISTORY_SECONDS + (index + 1) * period
            events += [(at - 2.0, "DOWN"), (at, "UP")]
    if net["link"] == "DOWN":
        # it went down at most a minute ago, or link_down_for_seconds before scenario time 0
        down_for = float(net.get("link_down_for_seconds") or 0.0)
        events.append((now - t - down_for if down_for else now - min(t, 60.0), "DOWN"))
    events.sort()
    ups = sum(1 for _, state in events if state == "UP")
    return ups, len(events) - ups, list(reversed(events))[:MAX_RECORDS]


def _link_stat(phy: int, net: Dict, t: float, now: float) -> Answer:
    ups, downs, records = link_history(net, t, now)
    prefix = "[devid {}]".format(phy)
    lines = ["{}current time        : {}".format(prefix, _asctime(now)),
             "{}link up count       : {}".format(prefix, ups),
             "{}link down count     : {}".format(prefix, downs),
             "{}link change records :".format(prefix)]
    lines += ["{}    {}    LINK {}".format(prefix, _asctime(at), state) for at, state in records]
    return "\n".join(lines) + "\n", "", 0


def _speed(phy: int, net: Dict, t: float, now: float) -> Answer:
    if net["link"] == "DOWN":
        return "Speed: Unknown!\n", "", 0
    return "Speed: {} Mb/s\n".format(int(net["speed_mbps"])), "", 0


def _bandwidth(phy: int, net: Dict, t: float, now: float) -> Answer:
    if net["link"] == "DOWN":
        tx = rx = 0.0
    else:
        tx = 1800.0 + 400.0 * math.sin(t / 60.0 + phy)
        rx = 1750.0 + 400.0 * math.cos(t / 60.0 + phy)
    return "".join("Bandwidth {}: {:5d}.{:02d} MB/sec\n".format(name, int(value), int(round(value * 100)) % 100)
                   for name, value in (("TX", tx), ("RX", rx))), "", 0


STAT_KEYS = (
    ["mac_tx_mac_pause_num", "mac_rx_mac_pause_num", "mac_tx_pfc_pkt_num"]
    + ["mac_tx_pfc_pri{}_pkt_num".format(i) for i in range(8)] + ["mac_rx_pfc_pkt_num"]
    + ["mac_rx_pfc_pri{}_pkt_num".format(i) for i in range(8)]
    + ["mac_tx_total_pkt_num", "mac_tx_total_oct_num", "mac_tx_bad_pkt_num", "mac_tx_bad_oct_num",
       "mac_rx_total_pkt_num", "mac_rx_total_oct_num", "mac_rx_bad_pkt_num", "mac_rx_bad_oct_num",
       "mac_rx_fcs_err_pkt_num", "roce_rx_rc_pkt_num", "roce_rx_all_pkt_num", "roce_rx_err_pkt_num",
       "roce_tx_rc_pkt_num", "roce_tx_all_pkt_num", "roce_tx_err_pkt_num", "roce_cqe_num", "roce_rx_cnp_pkt_num",
       "roce_tx_cnp_pkt_num", "roce_unexpected_ack_num", "roce_out_of_order_num", "roce_verification_err_num",
       "roce_qp_status_err_num", "roce_new_pkt_rty_num", "roce_ecn_db_num", "nic_tx_all_pkg_num",
       "nic_tx_all_oct_num", "nic_rx_all_pkg_num", "nic_rx_all_oct_num"])


DEFAULT_ROCE_PACKETS_PER_SECOND = 50000


def stat_counters(phy: int, net: Dict, t: float) -> Dict[str, int]:
    """Counters since boot (a day before the scenario started), growing with scenario time."""
    uptime = BOOT_UPTIME_SECONDS + t
    # RoCE traffic since boot at the default rate, then at the scenario's (0: a job whose collectives stopped)
    rate = max(0.0, float(net["roce_packets_per_second"]))
    packets = int(BOOT_UPTIME_SECONDS * DEFAULT_ROCE_PACKETS_PER_SECOND + rate * t) + 1000 * phy
    errors = int(math.floor(max(0.0, float(net["roce_errors_per_minute"])) * t / 60.0))
    pauses = int(math.floor(max(0.0, float(net["pause_frames_per_second"])) * t))
    counters = dict.fromkeys(STAT_KEYS, 0)
    counters.update({
        "mac_tx_total_pkt_num": packets, "mac_tx_total_oct_num": packets * 4096,
        "mac_rx_total_pkt_num": packets - 7, "mac_rx_total_oct_num": (packets - 7) * 4096,
        "roce_rx_rc_pkt_num": packets // 2, "roce_rx_all_pkt_num": packets // 2 + 11,
        "roce_tx_rc_pkt_num": packets // 2, "roce_tx_all_pkt_num": packets // 2 + 13,
        "roce_cqe_num": packets // 64, "roce_rx_err_pkt_num": errors, "roce_tx_err_pkt_num": errors // 2,
        "roce_new_pkt_rty_num": errors * 2, "roce_out_of_order_num": errors // 4,
        "nic_tx_all_pkg_num": int(uptime * 2), "nic_tx_all_oct_num": int(uptime * 2) * 138,
        "nic_rx_all_pkg_num": int(uptime * 70), "nic_rx_all_oct_num": int(uptime * 70) * 75,
        "mac_rx_pfc_pkt_num": pauses, "mac_rx_pfc_pri3_pkt_num": pauses,
        "mac_tx_pfc_pkt_num": pauses // 3, "mac_tx_pfc_pri3_pkt_num": pauses // 3,
    })
    return counters


def _stat(phy: int, net: Dict, t: float, now: float) -> Answer:
    counters = stat_counters(phy, net, t)
    return "packet statistics:\n" + "".join("{}:{}\n".format(key, counters[key]) for key in STAT_KEYS), "", 0


def _row(key: str, value: str) -> str:
    return "{:<21}: {}\n".format(key, value)


def _optical(phy: int, net: Dict, t: float, now: float) -> Answer:
    mode = net["optical"]
    if mode == "unsupported":
        return NOT_SUPPORTED, "", EXIT_NOT_SUPPORTED
    head = "optical info:\n" + _row("present", "not present" if mode == "absent" else "present")
    if mode == "absent":
        rows = [("temperature", "NA"), ("high power enable reg", "not enabled"), ("vendor name", "NA"),
                ("vendor part number", "NA"), ("vendor serial number", "NA"), ("vendor org unique id", "NA"),
                ("xsfp identifier", "NA"), ("xsfp wave length", "NA"), ("manufact date code", "NA"),
                ("Vcc", "NA"), ("Tx Power", "NA"), ("Rx Power", "NA")]
        rows += [(key, "NA") for key in ("Vcc High Thres", "Vcc Low Thres", "Temp High Thres", "Temp Low Thres",
                                        "TxPower High Thres", "TxPower Low Thres", "RxPower High Thres",
                                        "RxPower Low Thres")]
        return head + "".join(_row(key, value) for key, value in rows), "", 0
    degraded = mode == "degraded"
    temperature = 74 if degraded else 45 + phy % 4
    tx = [1.3968 + 0.01 * ((phy + lane) % 5) for lane in range(4)]
    rx = [1.0189 - 0.02 * ((phy + lane) % 3) for lane in range(4)]
    if degraded:
        rx[1], rx[2] = 0.0854, 0.1021  # below the module's RX low threshold 0.1445 mW
    rows = [("temperature", "{} C".format(temperature)), ("high power enable reg", "enabled"),
            ("vendor name", "Hisense"), ("vendor part number", "LTA8531-PC+"),
            ("vendor serial number", "V8BD6H2503{}".format(phy % 10)), ("vendor org unique id", "0xac 0x4a 0x0"),
            ("xsfp identifier", "QSFP28 or later"), ("xsfp wave length", "850 nm"),
            ("manufact date code", "2023.6.18"), ("Vcc", "3262.90 mV")]
    for lane in range(4):
        rows += [("Tx Power{}".format(lane), "{:.4f} mW".format(tx[lane])),
                 ("Rx Power{}".format(lane), "{:.4f} mW".format(rx[lane]))]
    rows += [("Vcc High Thres", "3465.00 mV"), ("Vcc Low Thres", "3135.00 mV"), ("Temp High Thres", "70 C"),
             ("Temp Low Thres", "0 C"), ("TxPower High Thres", "3.5481 mW"), ("TxPower Low Thres", "0.2818 mW"),
             ("RxPower High Thres", "3.5481 mW"), ("RxPower Low Thres", "0.1445 mW")]
    rows += [("Tx Bias{}".format(lane), "{:.4f} mA".format(7.9360 - 0.004 * lane)) for lane in range(4)]
    los = "0x6" if degraded else "0x0"
    rows += [("Tx Los Flag", "0x0"), ("Rx Los Flag", los), ("Tx LoL Flag", "0x0"), ("Rx LoL Flag", los)]
    rows += [("Host SNR Lane{}".format(lane), "not supported") for lane in range(4)]
    rows += [("Media SNR Lane{}".format(lane), "{:.4f} dB".format(23.1211 - 0.25 * lane)) for lane in range(4)]
    return head + "".join(_row(key, value) for key, value in rows), "", 0


def _ip(phy: int, net: Dict, t: float, now: float) -> Answer:
    if net["ip"] != "set":
        return "", "Get ipconf failed, because no ip was preset there!\n", 0x400D & 0xFF
    return "ipaddr:192.161.{}.10\nnetmask:255.255.255.0\n".format(200 + phy), "", 0


def _gateway(phy: int, net: Dict, t: float, now: float) -> Answer:
    if net["gateway"] != "set":
        return "", "Get gateway failed, because no gateway was preset there!\n", 0x4002 & 0xFF
    return "default gateway:192.161.{}.1, Iface:eth{}\n".format(200 + phy, phy % 8), "", 0


def _netdetect(phy: int, net: Dict, t: float, now: float) -> Answer:
    address = "192.161.{}.1".format(200 + phy) if net["gateway"] == "set" else "0.0.0.0"
    return "netdetect addr: {}\n".format(address), "", 0


COMMANDS = {"-link": _link, "-net_health": _net_health, "-link_stat": _link_stat, "-speed": _speed,
            "-bandwidth": _bandwidth, "-stat": _stat, "-optical": _optical, "-ip": _ip, "-gateway": _gateway,
            "-netdetect": _netdetect}


def main(argv: Optional[Sequence[str]] = None, started_seconds_ago: float = 0.0) -> int:
    """`started_seconds_ago`: how long the process has run already (its start is part of the call's time)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        call = begin_call(args, os.environ.get(STATE_ENV), time.time())
    except (SimStateError, OSError, ValueError) as exc:
        sys.stderr.write("hccn-tool-sim: {}\n".format(exc))
        return EXIT_SIMULATOR_MISUSE
    wait = call.wait_seconds - started_seconds_ago
    if wait > 0:
        time.sleep(wait)
    out, err, status = call.answer()
    sys.stdout.write(out)
    sys.stderr.write(err)
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main(started_seconds_ago=seconds_since_start()))
