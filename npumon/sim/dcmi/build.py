"""Build the simulated libdcmi.so from its C sources with the system compiler, once per source version.

    path = build_fake_library()              # ~/.cache/npumon/fake-dcmi/libdcmi-<hash>.so
    path = build_fake_library(cache_dir=d)   # or into a directory of your choice
    python -m npumon.sim.dcmi                # prints the path (exit 2 and one line on stderr if it cannot)

The cache directory is created 0755 and the library is 0755: a loader that refuses group- or
world-writable files (as npu-exporter's does) accepts them when the directories above are safe too.
The library's name carries a hash of the sources, the compiler and the flags: an unchanged library is
reused, a changed source builds a new one. A build goes to a temporary file renamed into place, so
processes building at the same time never load half a library. The compiler is $CC, else `cc`, else
`gcc`; without one, or when it fails, FakeDcmiBuildError says so in one line.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional

SOURCE_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCES = ("fake_dcmi.c", "fake_dcmi_getters.c", "fake_dcmi_state.c", "fake_dcmi_values.c", "fake_dcmi_v2.c",
           "fake_dcmi_links.c", "fake_dcmi_ub.c")
HEADERS = ("dcmi_interface_api.h", "dcmi_interface_api_v2.h", "dcmi_driver_extras.h", "fake_dcmi.h")
CFLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared")
LIBS = ("-lm", "-lpthread")
BUILD_TIMEOUT_SECONDS = 120


class FakeDcmiBuildError(RuntimeError):
    """No C compiler, or the build failed; the message is one line."""


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "npumon", "fake-dcmi")


def find_compiler() -> Optional[str]:
    """$CC (a name or a path), else cc, else gcc, as an absolute path; None when there is none."""
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name:
            path = shutil.which(name)
            if path:
                return path
    return None


def build_fake_library(cache_dir: Optional[str] = None, compiler: Optional[str] = None) -> str:
    """The absolute path of the simulated libdcmi.so, compiled first if this source version is not built.
    Raises FakeDcmiBuildError (one line) when there is no compiler or the build fails."""
    compiler = compiler or find_compiler()
    if compiler is None:
        raise FakeDcmiBuildError("cannot build the simulated libdcmi.so: no C compiler (set CC or install gcc)")
    cache_dir = os.path.abspath(cache_dir or default_cache_dir())
    target = os.path.join(cache_dir, "libdcmi-{}.so".format(source_hash(compiler)))
    if os.path.isfile(target):
        return target
    try:
        os.makedirs(cache_dir, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise FakeDcmiBuildError("cannot build the simulated libdcmi.so: cannot create {}: {}".format(
            cache_dir, exc.strerror or exc)) from None
    handle, temp_path = tempfile.mkstemp(dir=cache_dir, prefix=".build-", suffix=".so")
    os.close(handle)
    try:
        _compile(compiler, temp_path)
        os.chmod(temp_path, 0o755)
        os.replace(temp_path, target)
    finally:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
    return target


def compile_command(compiler: str, output: str) -> List[str]:
    return [compiler, *CFLAGS, "-I", SOURCE_DIR, "-o", output,
            *(os.path.join(SOURCE_DIR, name) for name in SOURCES), *LIBS]


def source_hash(compiler: str) -> str:
    digest = hashlib.sha256()
    for name in SOURCES + HEADERS:
        with open(os.path.join(SOURCE_DIR, name), "rb") as handle:
            digest.update(name.encode() + b"\0" + handle.read() + b"\0")
    digest.update(" ".join((compiler,) + CFLAGS + LIBS).encode())
    return digest.hexdigest()[:16]


def _compile(compiler: str, output: str) -> None:
    command = compile_command(compiler, output)
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=BUILD_TIMEOUT_SECONDS,
                                check=False)
    except subprocess.TimeoutExpired:
        raise FakeDcmiBuildError("cannot build the simulated libdcmi.so: {} took over {} s".format(
            compiler, BUILD_TIMEOUT_SECONDS)) from None
    except OSError as exc:
        raise FakeDcmiBuildError("cannot build the simulated libdcmi.so: cannot run {}: {}".format(
            compiler, exc.strerror or exc)) from None
    if result.returncode != 0:
        errors = result.stderr.decode("utf-8", "replace").strip().splitlines()
        first = next((line for line in errors if "error" in line), errors[0] if errors else "no message")
        raise FakeDcmiBuildError("cannot build the simulated libdcmi.so: {} exited {}: {}".format(
            os.path.basename(compiler), result.returncode, first.strip()))


def main() -> int:
    """`python -m npumon.sim.dcmi` (__main__.py)."""
    try:
        print(build_fake_library())
    except FakeDcmiBuildError as exc:
        sys.stderr.write("{}\n".format(exc))
        return 2
    return 0
