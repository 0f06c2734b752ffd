"""The shipped unit's limits around a process started by bench_stress.py, outside systemd: MemoryMax and
TasksMax as cgroup v1 memory and pids groups where /sys/fs/cgroup/{memory,pids} are writable (root), else
RLIMIT_AS as a stand-in for memory and no task limit; LimitNOFILE as RLIMIT_NOFILE. describe() says which
limits were real."""

import os
import resource
import signal
import time

MEMORY_LIMIT = 256 * 1024 * 1024  # MemoryMax=256M
TASKS_LIMIT = 128  # TasksMax=128
NOFILE_LIMIT = 1024  # LimitNOFILE=1024
CGROUP_V1 = "/sys/fs/cgroup"


class Limits:
    """The unit's limits around the daemon: cgroup v1 memory + pids where writable, rlimits otherwise."""

    def __init__(self, use_cgroups: bool):
        self.groups, self.notes = {}, []
        name = "npumon-stress-{}".format(os.getpid())
        for controller, knob, value in (("memory", "memory.limit_in_bytes", MEMORY_LIMIT),
                                        ("pids", "pids.max", TASKS_LIMIT)):
            path = os.path.join(CGROUP_V1, controller, name)
            if not use_cgroups:
                continue
            try:
                os.mkdir(path)
                with open(os.path.join(path, knob), "w") as handle:
                    handle.write(str(value))
                self.groups[controller] = path
            except OSError as exc:
                self.notes.append("cgroup {} not usable ({}): {}".format(controller, path, exc.strerror))
                if os.path.isdir(path):
                    os.rmdir(path)
        self.rlimit_as = "memory" not in self.groups

    def describe(self):
        return ["RLIMIT_NOFILE {0}:{0} (real: the kernel's per-process limit, as LimitNOFILE)".format(NOFILE_LIMIT),
                "memory cgroup v1, memory.limit_in_bytes = 256 MiB (real: the daemon and its npu-smi children, "
                "OOM-killed past it, as MemoryMax; no swap here)" if "memory" in self.groups else
                "RLIMIT_AS 256 MiB (a stand-in for MemoryMax: virtual memory, thread stacks count)",
                "pids cgroup v1, pids.max = 128 (real: threads and children, as TasksMax)" if "pids" in self.groups
                else "no task limit (RLIMIT_NPROC counts the whole user: not TasksMax)"] + self.notes

    def enter(self):
        """In the daemon's process before exec: join the groups, set the rlimits."""
        for path in self.groups.values():
            with open(os.path.join(path, "cgroup.procs"), "w") as handle:
                handle.write(str(os.getpid()))
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE_LIMIT, NOFILE_LIMIT))
        if self.rlimit_as:
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    def read(self, name, controller):
        try:
            with open(os.path.join(self.groups[controller], name)) as handle:
                return handle.read()
        except (KeyError, OSError):
            return ""

    def usage(self):
        return int(self.read("memory.usage_in_bytes", "memory") or 0), int(self.read("pids.current", "pids") or 0)

    def totals(self):
        oom = self.read("memory.oom_control", "memory").split()
        events = self.read("pids.events", "pids").split()
        return {"memory_peak": int(self.read("memory.max_usage_in_bytes", "memory") or 0),
                "oom_kills": int(oom[oom.index("oom_kill") + 1]) if "oom_kill" in oom else 0,
                "pids_peak": int(self.read("pids.peak", "pids") or 0),
                "pids_refused": int(events[events.index("max") + 1]) if "max" in events else 0}

    def close(self):
        for controller, path in self.groups.items():
            for pid in self.read("cgroup.procs", controller).split():  # the daemon's children, left behind
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
            for _ in range(50):  # the killed processes leave the group a moment later
                try:
                    os.rmdir(path)
                    break
                except OSError:
                    time.sleep(0.1)
