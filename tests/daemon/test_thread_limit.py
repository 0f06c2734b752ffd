"""The daemon within a task limit (issue 28): the simulated A3 (16 chips) with everything on -- the probe, every
hccn_tool tier, 8 webhook receivers that answer, a real gRPC kubelet pod-resources server, the kernel log making a
finding that is notified -- at realistic simulated latency, with the simulated tools as real processes, runs in a
pids cgroup whose pids.max is TASK_LIMIT (or, for a user other than root, under RLIMIT_NPROC that many tasks
above what the user runs now). No thread-creation failure in its log, no abort, scrapes answered."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import requests

from recording_server import RecordingServer

grpc = pytest.importorskip("grpc")
from npumon.sim.kubelet import FakeKubelet  # noqa: E402 - needs grpc

# Below the unit's TasksMax=128: the daemon's budget (40) with room for the tools' processes. In the simulator
# the daemon before the thread budget reached 80 within 40 s here and had 48 starts refused; after it, 35 tasks.
TASK_LIMIT = 80
RUN_SECONDS = 90.0  # the start's thread peak, the first polls of every tier and a second minute of the link tiers
SCRAPE_SECONDS = 5.0
AER_LINE = "<3>[{:>12.6f}] [ascend] [ERROR] [drv_pcie] [devdrv_aer 101] <kworker/0:1:77,77> Error detected. " \
           "(dev_id=3; aer_cnt=1)\n"
PODS = [("default", "infer-{}".format(n), [("server", [("huawei.com/Ascend910", ["Ascend910-{}".format(n)])])])
        for n in range(16)]
FAILURES = ("can't start new thread", "pthread_create", "Resource temporarily unavailable", "Traceback")


def pids_cgroup(limit):
    """(a new pids cgroup directory with pids.max = limit, None) or (None, why there is none)."""
    candidates = ["/sys/fs/cgroup/pids"]  # cgroup v1
    try:
        with open("/proc/self/cgroup") as handle:
            unified = [line.split(":", 2)[2].strip() for line in handle if line.startswith("0::")]
        candidates += ["/sys/fs/cgroup" + path for path in unified] + ["/sys/fs/cgroup/unified" + path
                                                                          for path in unified]
    except OSError:
        pass
    problems = []
    for base in candidates:
        if not os.path.isdir(base):
            continue
        path = os.path.join(base, "npumon-test-{}".format(os.getpid()))
        try:
            os.mkdir(path)
        except OSError as exc:
            problems.append("{}: {}".format(base, exc.strerror))
            continue
        try:
            with open(os.path.join(path, "pids.max"), "w") as handle:
                handle.write(str(limit))
            return path, None
        except OSError as exc:
            problems.append("{}: pids.max: {}".format(base, exc.strerror))
            os.rmdir(path)
    return None, "; ".join(problems) or "no cgroup hierarchy here"


def user_tasks(uid):
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat("/proc/" + name).st_uid == uid:
                    count += len(os.listdir("/proc/{}/task".format(name)))
            except OSError:
                continue
    return count


@pytest.fixture
def task_limit():
    """How to start a process under the limit: (argv prefix, description, the cgroup directory or None)."""
    cgroup, why = pids_cgroup(TASK_LIMIT)
    if cgroup is not None:
        procs = os.path.join(cgroup, "cgroup.procs")
        yield ["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs], "pids.max={} in {}".format(TASK_LIMIT, cgroup), \
            cgroup
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.rmdir(cgroup)
                break
            except OSError:
                time.sleep(0.2)  # its last processes are still leaving
        return
    if os.geteuid() == 0:
        pytest.skip("no writable pids cgroup ({}), and RLIMIT_NPROC does not bind root".format(why))
    limit = user_tasks(os.geteuid()) + TASK_LIMIT
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("no writable pids cgroup ({}) and no prlimit to set RLIMIT_NPROC".format(why))
    yield [prlimit, "--nproc={}".format(limit), "--"], "RLIMIT_NPROC={}".format(limit), None


@pytest.mark.slow
def test_everything_on_a_16_chip_host_runs_under_a_task_limit_without_a_thread_failure(tmp_path, task_limit):
    prefix, limit, cgroup = task_limit
    socket_dir = tempfile.mkdtemp(prefix="k8s", dir="/tmp")  # a unix socket path must stay under 108 bytes
    kmsg = tmp_path / "kern.log"
    kmsg.write_text("")
    log_path = tmp_path / "daemon.log"
    with RecordingServer(delay=0.05) as hooks, \
            FakeKubelet(os.path.join(socket_dir, "kubelet.sock"), PODS,
                        {"huawei.com/Ascend910": ["Ascend910-{}".format(n) for n in range(16)]}) as kubelet:
        receivers = ", ".join("{{name: hook{0}, type: webhook, url: '{1}'}}".format(n, hooks.url("/hook{}".format(n)))
                              for n in range(8))
        config = tmp_path / "npumon.yaml"
        config.write_text(
            "state_dir: {}\nexporter: {{listen: '127.0.0.1:0'}}\nfaults: {{kmsg_path: {}}}\nevents: {{enabled: true}}\n"
            "probe: {{enabled: true}}\nnetwork: {{enabled: true}}\n"
            "kubernetes: {{enabled: true, socket: {}, interval_seconds: 10, timeout_seconds: 5}}\n"
            "notify: {{receivers: [{}]}}\n".format(tmp_path / "state", kmsg, kubelet.path, receivers))
        env = dict(os.environ, NPUMON_SIM_LATENCY_SCALE="1", NPUMON_SIM_IN_PROCESS="0")
        argv = prefix + [sys.executable, "-m", "npumon.cli.main", "run", "--config", str(config),
                         "--simulate=healthy", "--sim-product", "atlas-a3", "--sim-state", str(tmp_path / "sim")]
        with open(str(log_path), "wb") as log:
            daemon = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                      cwd=str(tmp_path))  # npumon from PYTHONPATH, not from the current directory
        try:
            port = _port(log_path, daemon)
            answered, failed, peak = 0, [], 0
            started = time.monotonic()
            next_aer, next_scrape = started + 20, started
            while time.monotonic() - started < RUN_SECONDS and daemon.poll() is None:
                now = time.monotonic()
                if cgroup is not None:
                    peak = max(peak, _read_int(os.path.join(cgroup, "pids.current")))
                if now >= next_aer:
                    next_aer += 60
                    with open(str(kmsg), "a") as handle:
                        handle.write(AER_LINE.format(now - started))
                if now >= next_scrape:
                    next_scrape += SCRAPE_SECONDS
                    try:
                        answer = requests.get("http://127.0.0.1:{}/metrics".format(port), timeout=10)
                        answered += answer.status_code == 200
                        if answer.status_code != 200:
                            failed.append(answer.status_code)
                    except requests.RequestException as exc:
                        failed.append(str(exc))
                time.sleep(0.1)
            alive = daemon.poll() is None
            refused = _refused(cgroup)
        finally:
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
            shutil.rmtree(socket_dir, ignore_errors=True)
        calls = list(kubelet.calls)
    text = log_path.read_text(errors="replace")
    print("tasks in the cgroup, sampled every 0.1 s: at most {}; starts refused: {}".format(peak, refused))
    assert refused == 0, "the kernel refused {} thread or process starts under {}".format(refused, limit)
    assert alive, "the daemon died under {} (exit {}); log:\n{}".format(limit, daemon.returncode, text[-4000:])
    assert daemon.returncode == 0, text[-4000:]  # and it stopped cleanly on SIGTERM
    assert [line for line in text.splitlines() if any(failure in line for failure in FAILURES)] == [], text[-4000:]
    assert answered >= RUN_SECONDS / SCRAPE_SECONDS * 0.8 and not failed, (answered, failed)
    assert "List" in calls  # the kubelet was asked: grpc's own threads were inside the limit too
    assert hooks.requests, "no notification was delivered"


def _read_int(path):
    with open(path) as handle:
        return int(handle.read().split()[0])


def _refused(cgroup):
    """How many times the cgroup's pids.max refused a fork or a thread (pids.events), 0 without a cgroup."""
    if cgroup is None:
        return 0
    with open(os.path.join(cgroup, "pids.events")) as handle:
        return sum(int(line.split()[1]) for line in handle if line.startswith("max "))


def _port(log_path, daemon, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            if "serving on port" in line:
                return int(line.split("serving on port", 1)[1].split()[0])
        if daemon.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError("the daemon did not listen; log:\n" + log_path.read_text(errors="replace")[-4000:])
