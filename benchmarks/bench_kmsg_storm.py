"""Benchmark: a kernel-log storm into a running daemon.

`npumon run --simulate` (a subprocess, the healthy simulated A2 host) reads `faults.kmsg_path`, a file this
script appends 100,000 Ascend driver lines to in 10 s (DMA "Wait timeout." of device 0, as /dev/kmsg records).
Meanwhile it scrapes /metrics over HTTP every 50 ms and samples the daemon's RSS every 100 ms. Afterwards it
waits until the daemon has read every line, then counts what a real webhook receiver on 127.0.0.1 got: the
storm is one fault, so one rate-limited finding per rule, whose hint carries the suppressed count.

    python benchmarks/bench_kmsg_storm.py [--lines 100000] [--seconds 10]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time

import psutil
import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from daemon_harness import DaemonProcess, kill_leftovers, sample  # noqa: E402
from recording_server import RecordingServer  # noqa: E402

LINE = ("5,{seq},{usec},-;[ascend] [ERROR] [drv_pcie] [devdrv_dma_sync_copy 839] <python3:5150:5150> "
        "Wait timeout. (dev_id=0; chan_id={chan})\n")
CONFIG = """\
state_dir: {state}
probe: {{enabled: false}}
faults: {{kmsg_path: {kmsg}}}
notify:
  receivers:
    - {{name: hook, type: webhook, url: "{url}"}}
"""


def storm(path: str, lines: int, seconds: float) -> float:
    """Append `lines` records evenly over `seconds` in 100 batches a second; returns the seconds it took."""
    batches = max(1, int(seconds * 100))
    per_batch = -(-lines // batches)
    started = time.monotonic()
    seq = 1
    with open(path, "a", encoding="utf-8") as handle:
        for batch in range(batches):
            count = min(per_batch, lines - seq + 1)
            if count <= 0:
                break
            handle.write("".join(LINE.format(seq=seq + n, usec=(seq + n) * 100, chan=(seq + n) % 8)
                                 for n in range(count)))
            handle.flush()
            seq += count
            pause = started + (batch + 1) * seconds / batches - time.monotonic()
            if pause > 0:
                time.sleep(pause)
    return time.monotonic() - started


def run(lines: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as work, RecordingServer() as receiver:
        kmsg = os.path.join(work, "kmsg")
        open(kmsg, "w").close()
        config = os.path.join(work, "npumon.yaml")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write(CONFIG.format(state=os.path.join(work, "state"), kmsg=kmsg, url=receiver.url("/hook")))
        sim_state = os.path.join(work, "sim")
        daemon = DaemonProcess(["--config", config, "--simulate", "--sim-state", sim_state, "--listen",
                                "127.0.0.1:0"], env={"NPUMON_SIM_LATENCY_SCALE": "0"})
        try:
            daemon.wait_serving(60)
            process = psutil.Process(daemon.proc.pid)
            time.sleep(3)  # its first polls
            rss_before = process.memory_info().rss
            cpu_before = process.cpu_times()
            scrapes, rss = [], [rss_before]
            done = threading.Event()

            def scrape():
                while not done.is_set():
                    began = time.monotonic()
                    requests.get(daemon.url("/metrics"), timeout=10).raise_for_status()
                    scrapes.append(time.monotonic() - began)
                    rss.append(process.memory_info().rss)
                    time.sleep(0.05)

            scraper = threading.Thread(target=scrape)
            scraper.start()
            took = storm(kmsg, lines, seconds)
            storm_end = time.monotonic()
            done.set()
            scraper.join()
            storm_scrapes = list(scrapes)
            deadline = time.monotonic() + 120
            read = 0.0
            while time.monotonic() < deadline:
                text = daemon.get("/metrics").text
                read = sample(text, "npumon_kmsg_records_read") or 0.0
                rss.append(process.memory_info().rss)
                if read >= lines:
                    break
                time.sleep(0.5)
            caught_up = time.monotonic()
            cpu_after = process.cpu_times()
            time.sleep(15)  # the webhook's group interval (10 s) and the delivery
            rss.append(process.memory_info().rss)
            text = daemon.get("/metrics").text
            suppressed = sample(text, "npumon_kmsg_lines_suppressed")
            posts = [request.json() for request in receiver.requests]
        finally:
            daemon.close()
            kill_leftovers(sim_state)
    alerts = [alert for post in posts for alert in post["alerts"] if alert["status"] == "firing"]
    by_rule = {}
    for alert in alerts:
        by_rule.setdefault(alert["labels"]["alertname"], []).append(alert)
    ordered = sorted(storm_scrapes)
    return {
        "lines": lines, "storm_seconds": round(took, 2), "records_read": read, "suppressed": suppressed,
        "catch_up_seconds": round(caught_up - storm_end, 2),
        "scrapes": len(ordered), "scrape_p50_ms": round(1000 * statistics.median(ordered), 1),
        "scrape_p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
        "scrape_max_ms": round(1000 * ordered[-1], 1),
        "rss_before_mib": round(rss_before / 2**20, 1), "rss_peak_mib": round(max(rss) / 2**20, 1),
        "daemon_cpu_seconds": round((cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system), 2),
        "webhook_posts": len(posts),
        "firing_alerts": {rule: len(found) for rule, found in by_rule.items()},
        "transient_description": (by_rule.get("driver-transient-fault") or [{}])[0].get("annotations", {}).get("description", ""),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    load = os.getloadavg()
    result = run(args.lines, args.seconds)
    result.update(load_before=[round(x, 1) for x in load], load_after=[round(x, 1) for x in os.getloadavg()],
                  python=platform.python_version(), machine=platform.machine(), cpus=os.cpu_count(),
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
