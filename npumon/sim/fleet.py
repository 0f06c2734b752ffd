"""`npumon fleet-sim`: a simulated fleet on this machine, for trying the dashboards, the alert rules and
`npumon fleet` without NPU hosts.

It starts one `npumon run --simulate=SCENARIO` per simulated host, each with its own config, state
directory and port on 127.0.0.1 (nothing listens on any other address), plus, in the default fleet, one
target with no daemon behind it (a host that is down); `hosts=fleet_hosts(N)` makes N running hosts. Each
host answers its npu-smi and hccn_tool calls in-process (NPUMON_SIM_IN_PROCESS=1: the simulator's code in
the daemon's own process, at the latency model's speed, without a Python start per call), which is what
lets 50 hosts run on a 2-core machine. A Prometheus, when one is installed, scrapes them with the `npumon`
job of the shipped scrape config (exporters/prometheus.yml) reading a file_sd file that gives every target
its `host` label, and evaluates the shipped alert rules (alerts/npumon.rules.yml). The shipped job drops the
port from `instance` (one npumon per host); here every host shares one address, so `instance` is set back
to address:port after the shipped relabelling, and stays distinct per host.

    with Fleet(directory, prometheus="/usr/bin/prometheus") as fleet:   # starts everything
        fleet.prometheus_url                                               # http://127.0.0.1:19090

Everything runs in its own process group and is stopped (the group killed) on exit.
"""

import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import yaml

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED_SCRAPE_CONFIG = os.path.join(REPO_DIR, "exporters", "prometheus.yml")
SHIPPED_ALERT_RULES = os.path.join(REPO_DIR, "alerts", "npumon.rules.yml")
SCRAPE_JOB = "npumon"
STOP_GRACE_SECONDS = 10.0
START_WAIT_SECONDS = 60.0  # a host that neither listens nor exits by then is left to the log lines

# Fast enough that every dashboard panel has data within a minute, slow enough that five simulated hosts
# (each npu-smi call is a Python process) leave a 2-core machine room to breathe.
FAST_POLL = {"table_seconds": 5, "usages_seconds": 15, "power_seconds": 30, "health_seconds": 20,
             "ecc_seconds": 20, "board_seconds": 300, "host_seconds": 5}


@dataclass(frozen=True)
class SimHost:
    name: str  # the `host` label
    scenario: str
    product: str
    config: Dict[str, Any] = field(default_factory=dict)  # merged into the host's generated config
    running: bool = True  # False: a target Prometheus cannot reach, a host that is down
    description: str = ""


DEFAULT_FLEET = (
    SimHost("sim-a2-healthy", "healthy", "atlas-800i-a2", description="8 x 910B3, all nominal"),
    SimHost("sim-a3-overheat", "overheat", "atlas-a3", description="16 dies, one at 85 C and rising"),
    SimHost("sim-duo-alarm", "health-alarm", "atlas-300i-duo", description="300I Duo cards, one chip in Alarm"),
    SimHost("sim-a2-ecc", "ecc-rising", "atlas-800i-a2", description="single-bit ECC rising, one double-bit"),
    SimHost("sim-200i-control", "healthy-triton", "atlas-200i-a2",
            config={"control": {"enabled": True, "dry_run": True}},
            description="310B board serving with Triton, fan control in dry-run"),
    SimHost("sim-a2-offline", "healthy", "atlas-800i-a2", running=False, description="no daemon: a host that is down"),
)


class FleetError(Exception):
    """The fleet could not start; one line for the user."""


LOOPBACK = "127.0.0.1"
MAX_HOSTS = 1000


def host_address(index: int, base_port: int) -> str:
    """127.0.0.1:base+1, 127.0.0.1:base+2, ...: a port of its own per host, on 127.0.0.1 only."""
    return "{}:{}".format(LOOPBACK, base_port + index + 1)


def fleet_hosts(count: int) -> List[SimHost]:
    """`count` running hosts: the default fleet's running kinds in turn (scenario, product, extras), each
    name numbered (sim-a2-healthy-01, sim-a3-overheat-02, ...)."""
    kinds = [host for host in DEFAULT_FLEET if host.running]
    width = max(2, len(str(count)))
    return [SimHost("{}-{:0{}d}".format(kind.name, index + 1, width), kind.scenario, kind.product, kind.config,
                    description=kind.description)
            for index, kind in enumerate(kinds[i % len(kinds)] for i in range(count))]


# The NPU network tiers (hccn_tool) on the same footing: the link and the counters soon, the costly ones rarely.
FAST_NETWORK = {"link_seconds": 15, "stat_seconds": 15, "bandwidth_seconds": 300, "optical_seconds": 300,
                "config_seconds": 300}


def host_config(host: SimHost, state_dir: str, poll: Dict[str, float],
                network: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
    """The npumon config of one simulated host: its polls, npu-exporter names on, the host's extras."""
    config = {"state_dir": state_dir, "poll": dict(poll), "exporter": {"npu_exporter_compat": True},
              "network": dict(FAST_NETWORK if network is None else network)}
    return _merged(config, host.config)


def _merged(base: Dict[str, Any], extra: Dict[str, Any]) -> Dict[str, Any]:
    result = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def file_sd_groups(hosts: Sequence[SimHost], base_port: int) -> List[Dict[str, Any]]:
    """The file_sd target groups: one per host, with its `host`, scenario and product labels."""
    return [{"targets": [host_address(index, base_port)],
             "labels": {"host": host.name, "scenario": host.scenario, "product": host.product}}
            for index, host in enumerate(hosts)]


def prometheus_config(targets_file: str, rule_files: Sequence[str], scrape_interval: str,
                      evaluation_interval: str, shipped_config: Optional[str] = SHIPPED_SCRAPE_CONFIG) -> Dict[str, Any]:
    """Prometheus's config: the shipped `npumon` job (its relabelling included) pointed at our file_sd file.
    Without the shipped file (an installed package, not a clone) a plain job with the same name is used."""
    job: Dict[str, Any] = {"job_name": SCRAPE_JOB}
    if shipped_config and os.path.exists(shipped_config):
        with open(shipped_config, encoding="utf-8") as handle:
            shipped = yaml.safe_load(handle) or {}
        job = next((dict(j) for j in shipped.get("scrape_configs", []) if j.get("job_name") == SCRAPE_JOB), job)
    job["file_sd_configs"] = [{"files": [targets_file], "refresh_interval": "5s"}]
    # Every simulated host listens on 127.0.0.1: keep the port in `instance`, or the hosts would share one.
    job["relabel_configs"] = list(job.get("relabel_configs") or []) + [
        {"source_labels": ["__address__"], "target_label": "instance"}]
    job["scrape_interval"] = scrape_interval
    job["scrape_timeout"] = scrape_interval  # may not exceed the interval; a scrape is served from memory
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "rule_files": list(rule_files),
        "scrape_configs": [job],
    }


class Fleet:
    """The simulated hosts and their Prometheus, started by start() (or `with`), stopped by stop()."""

    def __init__(self, directory: str, hosts: Sequence[SimHost] = DEFAULT_FLEET, base_port: int = 19100,
                 prometheus: Optional[str] = None, prometheus_port: Optional[int] = None,
                 rule_files: Sequence[str] = (), scrape_interval: str = "5s", evaluation_interval: str = "5s",
                 poll: Optional[Dict[str, float]] = None, shipped_config: Optional[str] = SHIPPED_SCRAPE_CONFIG,
                 network: Optional[Dict[str, float]] = None, time_scale: float = 1.0):
        self.directory = os.path.abspath(directory)
        self.hosts = list(hosts)
        self.base_port = base_port
        self.prometheus_binary = prometheus
        self.prometheus_port = prometheus_port if prometheus_port is not None else base_port
        self.rule_files = [os.path.abspath(path) for path in rule_files]
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.poll = dict(FAST_POLL if poll is None else poll)
        self.network = dict(FAST_NETWORK if network is None else network)
        self.shipped_config = shipped_config
        self.time_scale = time_scale  # simulated seconds per wall second on every host
        self._processes: Dict[str, subprocess.Popen] = {}

    # -- paths and addresses -------------------------------------------------------------------------

    def address(self, host: SimHost) -> str:
        return host_address(self.hosts.index(host), self.base_port)

    def metrics_url(self, host: SimHost) -> str:
        return "http://{}/metrics".format(self.address(host))

    def host_dir(self, host: SimHost) -> str:
        return os.path.join(self.directory, host.name)

    def sim_dir(self, host: SimHost) -> str:
        """The host's simulation state (simulation.set_scenario switches it)."""
        return os.path.join(self.directory, host.name, "sim")

    def state_dir(self, host: SimHost) -> str:
        """The host's npumon state: its event history."""
        return os.path.join(self.directory, host.name, "state")

    def log_path(self, name: str) -> str:
        return os.path.join(self.directory, name, "log.txt")

    @property
    def prometheus_url(self) -> str:
        return "http://127.0.0.1:{}".format(self.prometheus_port)

    @property
    def prometheus_config_path(self) -> str:
        return os.path.join(self.directory, "prometheus", "prometheus.yml")

    # -- lifecycle -----------------------------------------------------------------------------------

    def __enter__(self) -> "Fleet":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        try:
            for host in self.hosts:
                if host.running:
                    self._start_host(host)
            if self.prometheus_binary:
                self._start_prometheus()
        except BaseException:
            self.stop()
            raise

    def _start_host(self, host: SimHost) -> None:
        host_dir = self.host_dir(host)
        os.makedirs(host_dir, exist_ok=True)
        config_path = os.path.join(host_dir, "npumon.yaml")
        _write_yaml(config_path, host_config(host, self.state_dir(host), self.poll, self.network))
        argv = [sys.executable, "-m", "npumon.cli.main", "run", "--config", config_path,
                "--simulate=" + host.scenario, "--sim-product", host.product,
                "--sim-state", self.sim_dir(host), "--listen", self.address(host)]
        if self.time_scale != 1.0:
            argv += ["--sim-time-scale", repr(self.time_scale)]
        from .simulation import IN_PROCESS_ENV  # here: `npumon fleet` imports this module, not the simulator

        # The simulator answers inside the host's own process: a Python start per npu-smi call, times N
        # hosts, would be most of the machine.
        self._spawn(host.name, argv, env=host_environment(os.environ, {IN_PROCESS_ENV: "1"}), cwd=host_dir)

    def _start_prometheus(self) -> None:
        prometheus_dir = os.path.join(self.directory, "prometheus")
        os.makedirs(prometheus_dir, exist_ok=True)
        targets = os.path.join(prometheus_dir, "npumon-targets.json")
        with open(targets, "w", encoding="utf-8") as handle:
            json.dump(file_sd_groups(self.hosts, self.base_port), handle, indent=2)
        _write_yaml(self.prometheus_config_path, prometheus_config(
            targets, self.rule_files, self.scrape_interval, self.evaluation_interval, self.shipped_config))
        self._spawn("prometheus", [
            self.prometheus_binary, "--config.file=" + self.prometheus_config_path,
            "--storage.tsdb.path=" + os.path.join(prometheus_dir, "data"),
            "--web.listen-address=127.0.0.1:{}".format(self.prometheus_port),
        ])

    def _spawn(self, name: str, argv: List[str], env: Optional[Dict[str, str]] = None,
               cwd: Optional[str] = None) -> None:
        os.makedirs(os.path.dirname(self.log_path(name)), exist_ok=True)
        with open(self.log_path(name), "ab") as log:
            try:
                # Its own session: stop() kills the whole group, npu-smi-sim children included.
                self._processes[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, env=env,
                                                         stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
            except OSError as exc:
                raise FleetError("cannot start {}: {}".format(argv[0], exc.strerror or exc)) from None

    def pids(self) -> Dict[str, int]:
        """name -> process id of every process started and still running."""
        return {name: process.pid for name, process in self._processes.items() if process.poll() is None}

    def wait_started(self, timeout: float = START_WAIT_SECONDS) -> List[str]:
        """Wait until every started host listens or has exited (at most `timeout` seconds); the names of those
        that exited."""
        deadline = time.monotonic() + timeout
        waiting = [host for host in self.hosts if host.running and host.name in self._processes]
        while waiting and time.monotonic() < deadline:
            waiting = [host for host in waiting
                       if self._processes[host.name].poll() is None and not _listening(self.address(host))]
            if waiting:
                time.sleep(0.2)
        return sorted(name for name in self.exited() if name != "prometheus")

    def exited(self) -> Dict[str, int]:
        """name -> exit code of every process that has stopped by itself."""
        return {name: process.returncode for name, process in self._processes.items()
                if process.poll() is not None}

    def stop(self) -> None:
        for process in self._processes.values():
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for process in self._processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
            # The group may outlive its leader (a child still running): make sure nothing is left.
            _signal_group(process, signal.SIGKILL)
        self._processes.clear()

    def log_tail(self, name: str, lines: int = 5) -> str:
        try:
            with open(self.log_path(name), encoding="utf-8", errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return ""


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


# The folder this npumon was imported from: a host's `python -m npumon...` must import the same one.
IMPORT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def host_environment(environ: Dict[str, str], extra: Dict[str, str]) -> Dict[str, str]:
    """A simulated host's environment: `environ` plus `extra`, with this npumon's folder first on PYTHONPATH.
    `python -m` puts its working directory first on sys.path, and from the parent folder of a clone named
    `npumon` that folder (no __init__.py: a namespace package) hid an npumon installed with `pip install -e`:
    every host died with an ImportError. The hosts also run in their own folders, never in the caller's."""
    paths = [IMPORT_ROOT] + [path for path in environ.get("PYTHONPATH", "").split(os.pathsep)
                             if path and path != IMPORT_ROOT]
    return dict(environ, PYTHONPATH=os.pathsep.join(paths), **extra)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _write_yaml(path: str, document: Dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(document, handle, sort_keys=False)


# --------------------------------------------------------------------------------------------- command

def cmd_fleet_sim(args) -> int:
    if args.hosts is not None and not 1 <= args.hosts <= MAX_HOSTS:
        print("npumon: --hosts: must be from 1 to {}".format(MAX_HOSTS), file=sys.stderr)
        return 2
    hosts = DEFAULT_FLEET if args.hosts is None else fleet_hosts(args.hosts)
    if not 1024 <= args.base_port <= 65535 - len(hosts):
        print("npumon: --base-port: must be from 1024 to {}".format(65535 - len(hosts)), file=sys.stderr)
        return 2
    prometheus = None
    if not args.no_prometheus:
        prometheus = args.prometheus or shutil.which("prometheus")
        if args.prometheus and not (os.path.isfile(prometheus) and os.access(prometheus, os.X_OK)):
            print("npumon: --prometheus: not an executable file: {}".format(prometheus), file=sys.stderr)
            return 2
    rules = args.rules if args.rules is not None else [p for p in (SHIPPED_ALERT_RULES,) if os.path.exists(p)]
    for path in rules:
        if not os.path.isfile(path):
            print("npumon: --rules: no such file: {}".format(path), file=sys.stderr)
            return 2
    if args.campaign:
        return _run_campaign(args, prometheus, rules)
    directory = args.dir or tempfile.mkdtemp(prefix="npumon-fleet-")
    # Many hosts poll at npumon's default intervals (the fleet's cost is then a real fleet's); the five of the
    # default fleet poll faster, so that every dashboard panel has data within a minute.
    slow = {} if args.hosts is not None else None
    fleet = Fleet(directory, hosts=hosts, base_port=args.base_port, prometheus=prometheus, rule_files=rules,
                  scrape_interval=args.scrape_interval, evaluation_interval=args.scrape_interval,
                  poll=slow, network=slow)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    try:
        fleet.start()
        dead = fleet.wait_started()
        running = [host for host in fleet.hosts if host.running]
        if running and len(dead) == len(running):  # nothing to try `npumon fleet` on
            raise FleetError("every simulated host exited at start; {}'s log ends:\n{}".format(
                dead[0], fleet.log_tail(dead[0])))
        print(_banner(fleet, prometheus, rules), flush=True)
        reported = set()
        while not stop:
            time.sleep(1)
            for name, code in fleet.exited().items():
                if name not in reported:
                    reported.add(name)
                    print("{} exited with code {}; its log ends:\n{}".format(name, code, fleet.log_tail(name)),
                          file=sys.stderr, flush=True)
    except FleetError as exc:
        print("npumon: " + str(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    finally:
        fleet.stop()
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


CAMPAIGN_WARMUP_SECONDS = 45.0  # every host's first polls (the slowest campaign tier runs every 30 s) before any fault


def _run_campaign(args, prometheus: Optional[str], rules: Sequence[str]) -> int:
    """`fleet-sim --campaign FILE`: healthy hosts, the campaign played on them, the score. The directory is kept
    (the ground truth, the events and the score are the point of the run)."""
    # here, not at the top: `npumon fleet` imports this module, and the campaign brings in the rules and events
    from .campaign import (CampaignError, CampaignPlayer, HOST_CONFIG, PRODUCT, dcmi_hosts, fleet_dcmi_library,
                           host_events, host_extras, host_name, load_campaign, read_truth)
    from .campaign_receiver import NotificationReceiver
    from .campaign_score import render_markdown, score
    from .simulation import set_scenario

    try:
        campaign = load_campaign(args.campaign)
        library = fleet_dcmi_library(campaign, args.campaign)  # built once here, not by each host
    except CampaignError as exc:
        print("npumon: --campaign: {}".format(exc), file=sys.stderr)
        return 2
    count = args.hosts or campaign["hosts"]
    if count < campaign["hosts"]:
        print("npumon: --hosts: the campaign names hosts up to {}".format(campaign["hosts"]), file=sys.stderr)
        return 2
    directory = os.path.abspath(args.dir or tempfile.mkdtemp(prefix="npumon-campaign-"))
    names = [host_name(index + 1, count) for index in range(count)]
    scenarios = os.path.join(directory, "scenarios")
    receiver = NotificationReceiver()  # the hosts' on-call: when each alert arrived
    on_dcmi = set(dcmi_hosts(campaign))
    hosts = [SimHost(name, os.path.join(scenarios, name + ".yaml"), PRODUCT,
                     config=host_extras(name, receiver.url_for(name), library if index + 1 in on_dcmi else None))
             for index, name in enumerate(names)]
    fleet = Fleet(directory, hosts=hosts, base_port=args.base_port, prometheus=prometheus, rule_files=rules,
                  scrape_interval=args.scrape_interval, evaluation_interval=args.scrape_interval,
                  poll=HOST_CONFIG["poll"], network=HOST_CONFIG["network"], time_scale=campaign["time_scale"])
    player = CampaignPlayer(campaign, names, scenarios, sim_dir=lambda index: fleet.sim_dir(hosts[index - 1]),
                            switch=lambda index, path: set_scenario(fleet.sim_dir(hosts[index - 1]), path),
                            truth_path=os.path.join(directory, "truth.jsonl"))
    player.write_healthy()  # the hosts start on their own scenario files
    try:
        receiver.start()
        fleet.start()
        dead = fleet.wait_started()
        if dead:
            raise FleetError("{} exited at start; its log ends:\n{}".format(dead[0], fleet.log_tail(dead[0])))
        print("campaign {}: {} injections on {} hosts in {}".format(
            args.campaign, len(campaign["injections"]), count, directory), flush=True)
        time.sleep(CAMPAIGN_WARMUP_SECONDS)
        started = time.time()
        player.play()
    except FleetError as exc:
        print("npumon: " + str(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        fleet.stop()
        receiver.stop()
    # what the hosts recorded and notified from the campaign's start on (their start-up is not part of it)
    events = [event for host in hosts for event in host_events(host.name, fleet.state_dir(host))
              if event["time"] >= started] + [event for event in receiver.events() if event["time"] >= started]
    with open(os.path.join(directory, "events.jsonl"), "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(event, sort_keys=True) + "\n" for event in events)
    _, truth = read_truth(os.path.join(directory, "truth.jsonl"))
    report = score(truth, events, names)
    with open(os.path.join(directory, "score.json"), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1, sort_keys=True)
    print(render_markdown(report))
    print("ground truth, events and score in {}".format(directory))
    return 0


def _banner(fleet: Fleet, prometheus: Optional[str], rules: Sequence[str]) -> str:
    lines = ["simulated fleet in {}".format(fleet.directory)]
    for host in fleet.hosts:
        where = fleet.metrics_url(host) if host.running else "{} (nothing listens)".format(fleet.address(host))
        lines.append("  {:<18} {:<13} {:<15} {}".format(host.name, host.scenario, host.product, where))
    if prometheus:
        lines.append("prometheus           {}  (config {}; alert rules: {})".format(
            fleet.prometheus_url, fleet.prometheus_config_path, ", ".join(rules) or "none"))
        lines.append("try:                 npumon fleet --prometheus {}".format(fleet.prometheus_url))
        lines.append("grafana:             add the Prometheus datasource {} and import grafana/dashboards/*.json"
                     .format(fleet.prometheus_url))
    else:
        lines.append("no prometheus (install Debian's `prometheus` or pass --prometheus PATH)")
    lines.append("Ctrl-C stops everything.")
    return "\n".join(lines)
