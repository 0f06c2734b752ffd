"""The checks a libdcmi.so passes before anything loads it (npu-exporter's: an absolute path, owned by root, not
group/world-writable, every directory above it too), each refused in one line that names the check."""

import os

import pytest

from npumon.sources.dcmi.library import DEFAULT_LOCATIONS, LibraryRefused, check_path, find_library
from paths import sticky_ancestor


@pytest.fixture
def library(tmp_path):
    """A root-owned 0755 directory holding a 0644 file (the test runs as root, like npumon on a host)."""
    directory = tmp_path / "driver"
    directory.mkdir(mode=0o755)
    os.chmod(str(tmp_path), 0o755)
    path = directory / "libdcmi.so"
    path.write_bytes(b"\x7fELF")
    os.chmod(str(path), 0o644)
    return path


def _refusal(path, **kwargs) -> str:
    with pytest.raises(LibraryRefused) as caught:
        check_path(str(path), **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


def _as_root():
    if os.getuid() != 0:
        pytest.skip("needs root to own the files it checks")


def test_a_relative_path_is_refused(library):
    assert _refusal("driver/libdcmi.so") == "dcmi library driver/libdcmi.so: refused: not an absolute path"


def test_a_group_writable_library_is_refused(library):
    _as_root()
    os.chmod(str(library), 0o664)
    assert _refusal(library, sticky_dirs=True).endswith("refused: group-writable (mode 664)")


def test_a_world_writable_library_is_refused(library):
    _as_root()
    os.chmod(str(library), 0o646)
    assert "refused: world-writable (mode 646)" in _refusal(library, sticky_dirs=True)


def test_a_library_not_owned_by_root_is_refused(library):
    _as_root()
    os.chown(str(library), 1234, 0)
    assert _refusal(library, sticky_dirs=True).endswith("refused: not owned by root: owner uid 1234")


def test_a_group_writable_directory_above_it_is_refused(library):
    _as_root()
    os.chmod(str(library.parent), 0o775)
    message = _refusal(library, sticky_dirs=True)
    assert "refused: group-writable (directory {}) (mode 775)".format(library.parent) in message


def test_a_directory_owned_by_another_user_is_refused(library):
    _as_root()
    os.chown(str(library.parent), 1234, 0)
    assert "not owned by root (directory {}): owner uid 1234".format(library.parent) in _refusal(
        library, sticky_dirs=True)


def test_a_symlink_owned_by_another_user_is_refused(library, tmp_path):
    _as_root()
    link = tmp_path / "link.so"
    os.symlink(str(library), str(link))
    os.lchown(str(link), 1234, 0)
    assert "the symlink is owned by uid 1234, not root" in _refusal(link, sticky_dirs=True)


def test_a_world_writable_sticky_tmp_is_refused_on_a_real_host(library):
    """/tmp is 1777: a real host's library never passes through it (only the simulator's may)."""
    _as_root()
    message = _refusal(library)
    assert "-writable (directory {}) (mode 1777)".format(sticky_ancestor(library)) in message


def test_a_sound_library_passes_and_resolves(library, tmp_path):
    _as_root()
    link = tmp_path / "link.so"
    os.symlink(str(library), str(link))
    assert check_path(str(link), sticky_dirs=True) == os.path.realpath(str(library))


def test_find_library_names_what_it_tried(library):
    path, problem = find_library(None, locations=("/nonexistent/libdcmi.so",))
    assert path is None and problem == "no usable libdcmi.so: /nonexistent/libdcmi.so: not there"
    assert DEFAULT_LOCATIONS[0] == "/usr/local/Ascend/driver/lib64/driver/libdcmi.so"
    _as_root()
    os.chmod(str(library), 0o666)
    path, problem = find_library(str(library), sticky_dirs=True)
    assert path is None and "group-writable" in problem
