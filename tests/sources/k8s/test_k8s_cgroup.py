"""A process's container from its /proc/<pid>/cgroup, as containerd, CRI-O and docker name them."""

from npumon.sources.k8s.cgroup import container_of, read_container

ID = "0123456789abcdef" * 4


def test_container_ids_of_the_cgroup_drivers_and_runtimes():
    systemd = ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8f3c2a1e_1b2c_4d5e_8f90_"
               "0a1b2c3d4e5f.slice/cri-containerd-{}.scope\n".format(ID))
    found = container_of(systemd)
    assert (found.container_id, found.pod_uid) == (ID, "8f3c2a1e-1b2c-4d5e-8f90-0a1b2c3d4e5f")
    cgroupfs_v1 = ("12:pids:/kubepods/burstable/pod8f3c2a1e-1b2c-4d5e-8f90-0a1b2c3d4e5f/{0}\n"
                   "1:name=systemd:/kubepods/burstable/pod8f3c2a1e-1b2c-4d5e-8f90-0a1b2c3d4e5f/{0}\n".format(ID))
    assert container_of(cgroupfs_v1).container_id == ID
    assert container_of("0::/system.slice/docker-{}.scope\n".format(ID)).pod_uid is None
    assert container_of("0::/kubepods.slice/crio-{}.scope\n".format(ID)).container_id == ID


def test_host_processes_have_no_container():
    assert container_of("0::/user.slice/user-0.slice/session-3.scope\n") is None
    assert container_of("0::/\n") is None
    assert container_of("") is None


def test_read_container_under_a_proc_root(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text("0::/kubepods/pod8f3c2a1e-1b2c-4d5e-8f90-0a1b2c3d4e5f/" + ID + "\n")
    assert read_container(str(tmp_path), 42).container_id == ID
    assert read_container(str(tmp_path), 43) is None  # another PID namespace, or the process ended
