"""Issue 28 memory benchmark: what one hostile answer costs, and the A3 daemon fed them under MemoryMax=256M.

Part 1, one answer (in this process): `hccn_tool -i 0 -stat -g` answering 4 MiB - 1 byte (just under the
runner's cap) of random bytes, then of plausible text (`name:value` counter lines), read through the real
runner and parsed by the hccn source; tracemalloc's peak during the poll, as a multiple of the answer's size.

Part 2, the daemon (`npumon run --simulate=healthy --sim-product atlas-a3`, 16 chips, real subprocesses) with:
  * hccn_tool a script printing 4 MiB - 1 byte of random bytes (or, with --hccn text, of text) on every call,
    every network tier polled every --tier-seconds;
  * a kubelet pod-resources socket (a real gRPC server, tests/sources/k8s/kubelet_server.py) whose List answers
    --kubelet-mb MB (7.3 by default), polled every 5 s;
inside the unit's memory limit: a cgroup v1 memory group (memory.limit_in_bytes = 256 MiB) where
/sys/fs/cgroup/memory is writable, else RLIMIT_AS (stress_limits.py; the report says which). One scraper
GETs /metrics every 2 s. Recorded: scrapes answered, the daemon's peak RSS (VmHWM) and the cgroup's peak,
OOM kills, whether the daemon is alive at the end, and what the hccn and kubernetes sources say.

The npumon that runs is the one this process imports: PYTHONPATH=<a checkout> measures that checkout.
Run:  python benchmarks/bench_hostile.py [--seconds 90] [--label TEXT] [--append benchmarks/results/hostile.md]
Exit status 0 when the daemon stayed alive with no OOM kill and >= 99% of scrapes answered, 1 when not.
"""

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc

import npumon
from bench_stress import machine, scrape
from npumon.settings import parse_config
from npumon.model import ChipSample
from npumon.sources.hccn.source import HccnSource
from npumon.sources.runner import CommandRunner
from stress_limits import MEMORY_LIMIT, Limits

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "sources", "k8s"))
from kubelet_server import FakeKubelet  # noqa: E402 - the tests' stand-in kubelet

ANSWER_BYTES = 4 * 1024 * 1024 - 1  # just under the runner's default cap (npu_smi_max_output_bytes)
SCRAPE_SECONDS = 2.0
KUBELET_SECONDS = 30.0  # the default interval; a deadline of 25 s, time for the stand-in to build its answer
MIB = 2 ** 20
TEXT_LINE = b"rx_pkts_num:1234567890123\n"
A910 = "huawei.com/Ascend910"

TOOL = """#!/bin/sh
# hccn_tool for the benchmark: whatever it is asked, {size} bytes from {source}
exec head -c {size} {source}
"""


def answer_file(directory, kind):
    """A file of ANSWER_BYTES: random bytes or counter lines."""
    path = os.path.join(directory, kind + ".answer")
    with open(path, "wb") as handle:
        handle.write(os.urandom(ANSWER_BYTES) if kind == "binary"
                     else (TEXT_LINE * (ANSWER_BYTES // len(TEXT_LINE) + 1))[:ANSWER_BYTES])
    return path


def write_tool(directory, source):
    path = os.path.join(directory, "hccn_tool")
    with open(path, "w") as handle:
        handle.write(TOOL.format(size=ANSWER_BYTES, source=source))
    os.chmod(path, 0o755)
    return path


def one_answer(directory, kind):
    """(peak traced bytes, the status line) of one -stat poll of one chip answering ANSWER_BYTES of `kind`."""
    tool = write_tool(directory, answer_file(directory, kind))
    settings = parse_config("").network
    source = HccnSource(settings, [tool], CommandRunner(["npu-smi"], 10.0), 120.0)
    tracemalloc.start()
    try:
        source.poll("hccn:stat", [ChipSample(0, 0, name="910B3", phy_id=0)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, source.statuses(time.time())["hccn:stat"].error


def pods(megabytes):
    """Enough one-container pods, each with one NPU, for a List answer of about `megabytes` MB."""
    count = int(megabytes * 1e6 / 90)  # a pod below takes 90 bytes of the encoded answer
    return [("batch-{:03d}".format(n % 1000), "training-job-{:08d}-worker".format(n),
             [("worker", [(A910, ["Ascend910-{}".format(n % 16)])])]) for n in range(count)]


def write_config(directory, tool, socket, tier_seconds):
    path = os.path.join(directory, "npumon.yaml")
    with open(path, "w") as handle:
        handle.write(
            "state_dir: {state}\nexporter: {{listen: '127.0.0.1:0'}}\nprobe: {{enabled: false}}\n"
            "network: {{enabled: true, hccn_tool: {tool}, link_seconds: {t}, stat_seconds: {t}, "
            "bandwidth_seconds: {t}, optical_seconds: {t}, config_seconds: {t}}}\n"
            "kubernetes: {{enabled: true, socket: {socket}, interval_seconds: {k}, timeout_seconds: {kt}}}\n".format(
                state=os.path.join(directory, "state"), tool=tool, t=tier_seconds, socket=socket,
                k=KUBELET_SECONDS, kt=KUBELET_SECONDS - 5))
    return path


def source_line(metrics, source):
    """'up' / 'down' for `source` from /metrics, '?' when it has no series."""
    prefix = 'npumon_source_up{{source="{}"}} '.format(source)
    value = next((line[len(prefix):] for line in metrics.splitlines() if line.startswith(prefix)), None)
    return "?" if value is None else ("up" if float(value) == 1 else "down")


class Daemon:
    def __init__(self, argv, env, limits, log_path):
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, preexec_fn=limits.enter, start_new_session=True,
                                     cwd=os.path.dirname(os.path.dirname(npumon.__file__)))
        self.log_path = log_path

    def port(self):
        with open(self.log_path, "rb") as handle:
            for line in handle:
                if b"serving on port " in line:
                    return int(line.split(b"serving on port ")[1].split()[0].rstrip(b";"))
        return None

    def hwm(self):
        try:
            with open("/proc/{}/status".format(self.proc.pid)) as handle:
                return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM:"))
        except OSError:
            return None

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()

    def last_lines(self, count=6):
        """The last `count` lines of the log, and the last that says how the kubernetes source is."""
        with open(self.log_path, "rb") as handle:
            lines = [line.decode("utf-8", "replace").rstrip()[:300] for line in handle]
        kubernetes = [line for line in lines if "source kubernetes " in line][-1:]
        return kubernetes + [line for line in lines[-count:] if line not in kubernetes]


def hostile_daemon(args, directory):
    limits = Limits(use_cgroups=not args.no_cgroups)
    socket = os.path.join(tempfile.mkdtemp(prefix="k8s", dir="/tmp"), "kubelet.sock")  # under 108 bytes
    tool = write_tool(directory, "/dev/urandom" if args.hccn == "binary" else answer_file(directory, "text"))
    config = write_config(directory, tool, socket, args.tier_seconds)
    env = dict(os.environ, NPUMON_SIM_IN_PROCESS="0",
               PYTHONPATH=os.path.dirname(os.path.dirname(npumon.__file__)))
    argv = [sys.executable, "-m", "npumon.cli.main", "run", "--config", config, "--simulate=healthy",
            "--sim-product", "atlas-a3", "--sim-state", os.path.join(directory, "sim")]
    scrapes, hwm, seen, daemon = [], 0, {}, None
    try:
        with FakeKubelet(socket, pods(args.kubelet_mb), {A910: ["Ascend910-{}".format(n) for n in range(16)]}):
            daemon = Daemon(argv, env, limits, os.path.join(directory, "daemon.log"))
            deadline = time.monotonic() + 60
            while daemon.port() is None:
                if time.monotonic() > deadline or daemon.proc.poll() is not None:
                    raise RuntimeError("the daemon did not start: " + " | ".join(daemon.last_lines()))
                time.sleep(0.5)
            port, ends = daemon.port(), time.monotonic() + args.seconds
            while time.monotonic() < ends:
                started = time.monotonic()
                ok, seconds, text = scrape(port) if daemon.proc.poll() is None else (False, 0.0, "gone")
                scrapes.append(ok)
                if ok:
                    seen = {name: source_line(text, name) for name in ("hccn", "hccn:stat", "kubernetes", "npu-smi")}
                hwm = max(hwm, daemon.hwm() or 0)
                time.sleep(max(0.0, SCRAPE_SECONDS - (time.monotonic() - started)))
            alive = daemon.proc.poll() is None
    finally:
        if daemon is not None:
            daemon.stop()
        totals = limits.totals()  # before close() removes the groups
        limits.close()
        shutil.rmtree(os.path.dirname(socket), ignore_errors=True)
    return {"limits": limits.describe(), "totals": totals, "scrapes": scrapes, "hwm": hwm,
            "alive": alive, "exit": daemon.proc.returncode, "sources": seen, "last": daemon.last_lines()}


def report(args, answers, result, command):
    root = os.path.dirname(os.path.dirname(npumon.__file__))
    described = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=root)
    lines = ["## " + args.label, "", "- code: {} (npumon from {})".format(
                 described.stdout.strip() or "not a git checkout", root), "- machine: " + machine(),
             "- date: " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             "- load: the other engineers' work on the same 2 cores (1-min load average {:.1f} at the end)".format(
                 os.getloadavg()[0]),
             "- command: `{}`".format(command), "",
             "One `hccn_tool -stat` answer of {} bytes, read by the runner and parsed by the hccn source:".format(
                 ANSWER_BYTES), "", "| answer | peak traced memory | x answer | the source says |", "|---|---|---|---|"]
    for kind, (peak, error) in answers.items():
        lines.append("| {} | {:.1f} MiB | {:.2f} | {} |".format(kind, peak / MIB, peak / ANSWER_BYTES, error))
    if result is not None:
        scrapes, totals = result["scrapes"], result["totals"]
        answered = sum(scrapes)
        lines += ["", "The A3 daemon (16 chips), hccn_tool printing {} bytes of {} on every call (network tiers every "
                  "{:g} s), the kubelet answering {:g} MB every {:g} s, {:g} s:".format(
                      ANSWER_BYTES, "random bytes" if args.hccn == "binary" else "text", args.tier_seconds,
                      args.kubelet_mb, KUBELET_SECONDS, args.seconds),
                  "", "- limits: " + "; ".join(result["limits"]), "",
                  "| scrapes answered | daemon peak RSS (VmHWM) | cgroup memory peak | OOM kills | alive at the end "
                  "| sources at the last scrape |", "|---|---|---|---|---|---|",
                  "| {}/{} | {:.0f} MiB | {} | {} | {} | {} |".format(
                      answered, len(scrapes), result["hwm"] / MIB,
                      "{:.0f} MiB".format(totals["memory_peak"] / MIB) if totals["memory_peak"] else "-",
                      totals["oom_kills"], "yes" if result["alive"] else "no (exit {})".format(result["exit"]),
                      ", ".join("{} {}".format(name, state) for name, state in result["sources"].items()) or "-"),
                  "", "Last daemon log lines:", "", "```"] + result["last"] + ["```"]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="how long the daemon is fed (default 90)")
    parser.add_argument("--tier-seconds", type=float, default=5.0, help="every network tier's interval")
    parser.add_argument("--hccn", choices=("binary", "text"), default="binary")
    parser.add_argument("--kubelet-mb", type=float, default=7.3)
    parser.add_argument("--answers-only", action="store_true", help="part 1 only: no daemon")
    parser.add_argument("--no-cgroups", action="store_true", help="rlimits only, even where cgroups work")
    parser.add_argument("--label", default="npumon as it is")
    parser.add_argument("--append", metavar="FILE", help="also add the report to the end of FILE")
    args = parser.parse_args()
    command = " ".join(shlex.quote(word) for word in ["python", "benchmarks/bench_hostile.py"] + sys.argv[1:])
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # cleanup as on Ctrl-C
    directory = tempfile.mkdtemp(prefix="npumon-hostile-")
    try:
        answers = {kind: one_answer(directory, kind) for kind in ("binary", "text")}
        result = None if args.answers_only else hostile_daemon(args, directory)
    except (RuntimeError, OSError) as exc:
        print("bench_hostile: cannot run: {}".format(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench_hostile: interrupted", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    text = report(args, answers, result, command)
    print(text)
    if args.append:
        with open(args.append, "a") as handle:
            handle.write("\n" + text)
    if result is None:
        return 0
    totals, scrapes = result["totals"], result["scrapes"]
    met = result["alive"] and totals["oom_kills"] == 0 and sum(scrapes) >= 0.99 * len(scrapes) \
        and (totals["memory_peak"] or result["hwm"]) < MEMORY_LIMIT
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
