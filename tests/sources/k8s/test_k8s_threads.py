"""grpc's own threads, counted: the kubelet exchange starts grpc's event engine (a pool of clamp(CPUs, 4, 16)
workers, its timer and its lifeguard), no Python thread, and grpc shuts them down once the poll's channel is
closed, so they exist only while the kubelet is asked. Measured in a process of its own (the client and the
server each in one), so that no other test's grpc objects keep grpc running."""

import json
import os
import subprocess
import sys
import tempfile
import shutil

import pytest

pytest.importorskip("grpc")

from npumon.sources.k8s.client import grpc_thread_bound  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = '''
import sys, time
sys.path.insert(0, {here!r})
from npumon.sim.kubelet import FakeKubelet
with FakeKubelet(sys.argv[1], [], {{"huawei.com/Ascend910": ["Ascend910-0"]}}):
    print("ready", flush=True)
    sys.stdin.read()
'''
CLIENT = '''
import json, os, sys, threading, time
from npumon.sources.k8s.client import ask_kubelet
from npumon.sources.k8s.config import DEFAULT_MAX_MESSAGE_BYTES

def tasks():
    return len(os.listdir("/proc/self/task"))

peak, stop = [0], threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], tasks())
        time.sleep(0.002)

sampler = threading.Thread(target=sample, daemon=True)  # a failing call ends the child, not hangs it
sampler.start()
before = tasks()
peaks, afters = [], []
for _ in range(3):
    peak[0] = before
    answer = ask_kubelet(sys.argv[1], 5.0, DEFAULT_MAX_MESSAGE_BYTES)
    python_threads = threading.active_count()
    # the daemon asks every interval_seconds (30 s); here the next poll waits until grpc has ended, or 10 s
    deadline = time.monotonic() + 10
    while tasks() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    peaks.append(peak[0])
    afters.append(tasks())
stop.set()
sampler.join()
print(json.dumps({"before": before, "peaks": peaks, "afters": afters, "python": python_threads,
                  "pods": answer.pods}))
'''


# One poll at a time, as the daemon asks: polls back to back overlap one poll's grpc threads, still exiting, with
# the next one's (up to 11 over 7 in CI on 2026-12-04, with 4 CPU hogs here 4 of 40 runs). Spaced, 400 polls
# under 4 and 8 CPU hogs on 2 cores peaked at 6 or 7. Slow: grpc's lifeguard adds a worker for each second that
# every worker is busy, so it runs where it has the machine to itself.
@pytest.mark.slow
def test_grpcs_threads_stay_within_their_bound_and_end_with_the_poll():
    directory = tempfile.mkdtemp(prefix="k8s", dir="/tmp")  # a unix socket path must stay under 108 bytes
    path = os.path.join(directory, "kubelet.sock")
    server = subprocess.Popen([sys.executable, "-c", SERVER.format(here=HERE), path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        client = subprocess.run([sys.executable, "-c", CLIENT, path], capture_output=True, text=True, timeout=120)
    finally:
        server.stdin.close()
        server.wait(10)
        shutil.rmtree(directory, ignore_errors=True)
    counts = json.loads(client.stdout.splitlines()[-1])
    # the sampler and the main thread are the client's own; everything above them is grpc's
    assert counts["python"] == 2, counts  # no Python thread of grpc's
    for peak, after in zip(counts["peaks"], counts["afters"]):
        assert 1 <= peak - counts["before"] <= grpc_thread_bound(), counts
        assert after == counts["before"], counts  # gone once the channel was closed
