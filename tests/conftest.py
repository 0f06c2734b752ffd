"""Fixtures shared by several test files, and how the suite runs the simulator.

Simulated npu-smi calls answer in-process (NPUMON_SIM_IN_PROCESS=1, set here for the whole run and so
inherited by the `npumon` subprocesses the tests start): the same code answers as in the executable,
without a Python start per call. Tests marked `e2e` run the real executable in a subprocess per call:
`npumon check` end to end, the daemon process, hangs, kills and leftover processes. `pytest -m e2e` runs
just those; NPUMON_SIM_IN_PROCESS=0 runs the whole suite through the executable, as it ran before.

Simulated npu-smi latency (npumon/sim/latency.py) is off for the suite: NPUMON_SIM_LATENCY_SCALE=0, set here
and inherited like the above, because real-time tests (the daemon, the fleet, the executable) would wait
about 0.5-2.6 s per call and the suite would take many times its ~200 s. Tests that drive a fake clock lose
nothing: the in-process simulator sleeps through the test's sleep. Tests marked `realistic_latency` run at
hardware-like speed (scale 1), and so does every process they start; NPUMON_SIM_LATENCY_SCALE=1 runs the
whole suite that way (slow; for checking scheduling changes against real timing).

Every test runs with its own state directory: NPUMON_STATE_DIR (the default state_dir, inherited by the processes
a test starts) names an empty directory of the test's own, and fixtures wider than a test get one for the session.
The run fails if anything under the real /var/lib/npumon changed during it (tests/state_guard.py).

Hypothesis profiles set the example count of properties that do not set their own (the parser property):
"ci", the default, 2,000; "thorough", 10,000 (the parser property's bar), with HYPOTHESIS_PROFILE=thorough.
"""

import itertools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from types import SimpleNamespace

# Bytecode caches, as Python keeps them by default, even where PYTHONDONTWRITEBYTECODE is set: the suite starts
# hundreds of interpreters (daemons, commands, simulators), and each would compile npumon's modules again (about
# 0.5 s of CPU a start), and each xdist worker would rewrite every test module's asserts again (about 11 s). Before
# the imports below, so that the modules this file imports are written too (on a clean clone, the first process).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from bytecode_warmup import rewrite_once  # noqa: E402
from daemon_harness import DaemonProcess  # noqa: E402
from npumon.cli.main import main  # noqa: E402
from npumon.config.schema import DEFAULT_STATE_DIR, STATE_DIR_ENV  # noqa: E402
from npumon.sim.dcmi.build import FakeDcmiBuildError, build_fake_library, find_compiler  # noqa: E402
from npumon.sim.latency import LATENCY_SCALE_ENV  # noqa: E402
from npumon.sim.simulation import IN_PROCESS_ENV  # noqa: E402
from state_guard import StateGuard  # noqa: E402

# 1,000 examples a property in the default run (about a fifth of its CPU went to the 2,000 of before, and the
# suite is bound by CPU on two cores); HYPOTHESIS_PROFILE=thorough searches ten times further.
settings.register_profile("ci", deadline=None, max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, max_examples=10000,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


os.environ.setdefault(IN_PROCESS_ENV, "1")  # NPUMON_SIM_IN_PROCESS=0 runs every test through the executable
os.environ.setdefault(LATENCY_SCALE_ENV, "0")  # NPUMON_SIM_LATENCY_SCALE=1 runs every test at hardware speed
# Every command reads /etc/npumon/npumon.yaml when present; the tests (and their subprocesses) never read the
# host's: the default config file is one that does not exist, and a test that wants one sets NPUMON_CONFIG.
os.environ["NPUMON_CONFIG"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "no-such-dir", "npumon.yaml")


def _memory_scratch(minimum_free_bytes=4 << 30):
    """A directory in /dev/shm for the run's temporary files where it is a roomy tmpfs, else None. The suite
    makes tens of thousands of small files (simulated hosts, state, sockets); on ext4 each one replaced whole
    costs about 0.2 ms, on tmpfs a tenth of that. A container's 64 MiB /dev/shm is not used."""
    try:
        stat = os.statvfs("/dev/shm")
        if stat.f_bavail * stat.f_frsize < minimum_free_bytes:
            return None
        path = os.path.join("/dev/shm", "npumon-tests-{}".format(os.getuid()))
        # traversable, as /tmp is: a test that checks access as `nobody` builds its tree here (pytest's own
        # directories below stay closed to other users)
        os.makedirs(path, exist_ok=True)
        os.chmod(path, 0o755)
        return path if os.access(path, os.W_OK) else None
    except OSError:
        return None


# The run's temporary files (pytest's tmp_path too) go to memory unless TMPDIR says where; inherited by the
# workers and every process a test starts.
_SCRATCH = None if "TMPDIR" in os.environ else _memory_scratch()
if _SCRATCH is not None:
    os.environ["TMPDIR"] = _SCRATCH
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again

_SESSION_STATE = tempfile.mkdtemp(prefix="npumon-test-state-")
os.environ[STATE_DIR_ENV] = _SESSION_STATE  # for session- and module-wide fixtures; each test gets its own below
_state_dirs = itertools.count()


def _cpus():
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: three workers per CPU this process may run on (at most 16). Tests wait (a real Prometheus
    scraping, a daemon's next poll, a child process) while others compute, and the suite is bound by CPU: on 2
    CPUs it took 374 s with 2 workers, 293 s with 3 and 266 s with 4 (2026-11); on 2026-12-03, 260.5 s with 3,
    233.5 s with 4 and 214.7 s with 6, the two CPUs 193 % busy."""
    return min(16, 3 * _cpus())


def pytest_configure(config):
    config.addinivalue_line("markers", "realistic_latency: simulated npu-smi takes as long as on real hardware")
    config.pluginmanager.register(StateGuard(DEFAULT_STATE_DIR), "npumon-state-guard")
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # xdist's controller, before its workers start: the test modules' bytecode, once (tests/bytecode_warmup.py)
        rewrite_once(os.path.dirname(os.path.abspath(__file__)), _cpus())


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION_STATE, ignore_errors=True)


@pytest.fixture(autouse=True)
def _own_state_dir(monkeypatch):
    """NPUMON_STATE_DIR: an empty directory of this test's own (tests that set state_dir keep theirs)."""
    path = os.path.join(_SESSION_STATE, "test-{}".format(next(_state_dirs)))
    os.mkdir(path)
    monkeypatch.setenv(STATE_DIR_ENV, path)


@pytest.fixture(autouse=True)
def _simulator_path(request, monkeypatch):
    """`e2e` tests (and every process they start) run the simulator executable, as npumon does;
    `realistic_latency` tests simulate npu-smi at hardware speed."""
    if request.node.get_closest_marker("e2e") is not None:
        monkeypatch.delenv(IN_PROCESS_ENV, raising=False)
    if request.node.get_closest_marker("realistic_latency") is not None:
        monkeypatch.setenv(LATENCY_SCALE_ENV, "1")


@pytest.fixture
def cli(capsys, monkeypatch):
    """cli(*args, env=None): `npumon ARGS...` through the CLI's main() in this process, as an object with
    returncode, stdout and stderr like a finished process's: the same exit code and output as the executable,
    without an interpreter start per call. A usage error's SystemExit gives its code, as the executable's exit
    status would; the root logger a command set up is put back as it was. env: variables set for the call (and
    the rest of the test)."""
    def call(*args, env=None):
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        captured = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)
    return call


@pytest.fixture
def certificate(tmp_path):
    """(cert, key): a self-signed EC certificate for 127.0.0.1, in PEM files."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not on PATH; cannot make a test certificate")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    return cert, key


@pytest.fixture
def running():
    """start(daemon): start an in-process Daemon and stop it when the test ends."""
    daemons = []

    def start(daemon):
        daemon.start()
        daemons.append(daemon)
        return daemon

    yield start
    for daemon in daemons:
        daemon.stop()


@pytest.fixture
def daemons():
    """start(*args, env=None): `npumon run ARGS` as a real process (daemon_harness.DaemonProcess), closed when
    the test ends."""
    started = []

    def start(*args, env=None):
        daemon = DaemonProcess(list(args), env=env)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.close()


@pytest.fixture(scope="session")
def fake_dcmi_library(tmp_path_factory):
    """The simulated libdcmi.so, built once per test session with the system compiler (skipped without one)."""
    if find_compiler() is None:
        pytest.skip("no C compiler (cc or gcc) to build the simulated libdcmi.so")
    try:
        return build_fake_library(str(tmp_path_factory.mktemp("fake-dcmi")))
    except FakeDcmiBuildError as exc:
        pytest.fail(str(exc))
