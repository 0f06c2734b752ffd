"""Building the simulated libdcmi.so: once per source version, into the cache directory, with a one-line
error when there is no compiler or the build fails; it exports the DCMI functions and nothing else."""

import ctypes
import os
import shutil
import subprocess
import sys

import pytest

from npumon.sim.dcmi import build
from npumon.sim.dcmi.build import FakeDcmiBuildError, build_fake_library, find_compiler

needs_compiler = pytest.mark.skipif(find_compiler() is None, reason="no C compiler (cc or gcc)")

pytestmark = pytest.mark.integration  # builds and loads a C library with the system compiler


@needs_compiler
def test_an_unchanged_source_is_built_once(tmp_path):
    first = build_fake_library(str(tmp_path))
    built_at = os.stat(first).st_mtime_ns
    assert build_fake_library(str(tmp_path)) == first and os.stat(first).st_mtime_ns == built_at
    assert os.listdir(str(tmp_path)) == [os.path.basename(first)]  # no temporary file left behind


@needs_compiler
def test_a_changed_source_builds_a_new_library(tmp_path, monkeypatch):
    sources = tmp_path / "src"
    shutil.copytree(build.SOURCE_DIR, str(sources), ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    monkeypatch.setattr(build, "SOURCE_DIR", str(sources))
    first = build_fake_library(str(tmp_path / "cache"))
    with open(str(sources / "fake_dcmi.c"), "a") as handle:
        handle.write("\n/* changed */\n")
    second = build_fake_library(str(tmp_path / "cache"))
    assert second != first and os.path.isfile(second)


@needs_compiler
def test_only_the_dcmi_functions_are_exported(fake_dcmi_library):
    library = ctypes.CDLL(fake_dcmi_library)
    assert hasattr(library, "dcmi_get_device_die_v2") and hasattr(library, "dcmi_get_device_errorcode_string")
    assert not hasattr(library, "fake_begin") and not hasattr(library, "fake_get")


def test_no_compiler_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FakeDcmiBuildError) as caught:
        build_fake_library(str(tmp_path))
    assert str(caught.value) == "cannot build the simulated libdcmi.so: no C compiler (set CC or install gcc)"


@needs_compiler
def test_a_failing_build_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    sources = tmp_path / "src"
    shutil.copytree(build.SOURCE_DIR, str(sources), ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    with open(str(sources / "fake_dcmi_getters.c"), "a") as handle:
        handle.write("\nint broken(void) { return undeclared_name; }\n")
    monkeypatch.setattr(build, "SOURCE_DIR", str(sources))
    with pytest.raises(FakeDcmiBuildError) as caught:
        build_fake_library(str(tmp_path / "cache"))
    message = str(caught.value)
    assert "\n" not in message and "undeclared_name" in message and message.startswith("cannot build")
    assert os.listdir(str(tmp_path / "cache")) == []
    with pytest.raises(FakeDcmiBuildError, match="exited 1"):
        build_fake_library(str(tmp_path / "cache"), compiler=shutil.which("false"))


@needs_compiler
def test_the_module_prints_the_library_or_one_line(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    run = subprocess.run([sys.executable, "-m", "npumon.sim.dcmi"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.strip().startswith(str(tmp_path / "npumon" / "fake-dcmi"))
    assert os.path.isfile(run.stdout.strip())
    run = subprocess.run([sys.executable, "-m", "npumon.sim.dcmi"], env=dict(env, CC="", PATH=str(tmp_path)),
                         capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == "cannot build the simulated libdcmi.so: no C compiler (set CC or install gcc)\n"
