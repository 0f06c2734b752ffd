"""How the probe child is started: its argv and its environment. Pure functions.

On a real host the child finds pyACL and the CANN libraries where CANN's set_env.sh would put them,
derived from the config's ascend_dir unless probe.toolkit_dir / acl_python_path / library_path say
otherwise (reference: /usr/local/Ascend/ascend-toolkit/set_env.sh). A target with its own pyACL (Target.acl_dir:
`--simulate`'s) gives the child that instead, and nothing of a real install, so a simulation on an Ascend host
stays simulated.
"""

import json
import os
import sys
from typing import Dict, List, Mapping, Optional, Tuple

from .config import ProbeConfig, build_timeout_seconds

CHILD_MODULE = "npumon.sources.probe.child"
OP_CACHE_DIR = "probe-ops"  # under the state directory: single-op models (probe and diag), per SoC and CANN
# The directory that holds the npumon package: added to the child's PYTHONPATH when the child runs under
# another Python than the daemon's (the CANN one), which does not have npumon installed.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def toolkit_dir(probe: ProbeConfig, ascend_dir: str) -> str:
    return probe.toolkit_dir or os.path.join(ascend_dir, "ascend-toolkit", "latest")


def acl_python_path(probe: ProbeConfig, ascend_dir: str) -> str:
    return probe.acl_python_path or os.path.join(toolkit_dir(probe, ascend_dir), "python", "site-packages")


def library_path(probe: ProbeConfig, ascend_dir: str) -> List[str]:
    if probe.library_path is not None:
        return list(probe.library_path)
    toolkit = toolkit_dir(probe, ascend_dir)
    driver = os.path.join(ascend_dir, "driver", "lib64")
    return [driver, os.path.join(driver, "common"), os.path.join(driver, "driver"),
            os.path.join(toolkit, "lib64"), os.path.join(toolkit, "lib64", "plugin", "opskernel"),
            os.path.join(toolkit, "lib64", "plugin", "nnengine")]


def atc_path(probe: ProbeConfig, ascend_dir: str) -> str:
    return probe.atc_path or os.path.join(toolkit_dir(probe, ascend_dir), "compiler", "bin", "atc")


def acl_library(probe: ProbeConfig, ascend_dir: str) -> str:
    return probe.acl_library or os.path.join(toolkit_dir(probe, ascend_dir), "lib64", "libascendcl.so")


def compute_argv(probe: ProbeConfig, ascend_dir: str, state_dir: str, acl_dir: Optional[str] = None,
                 atc_argv: Optional[List[str]] = None) -> List[str]:
    """The acl child's compute-step flags: the step, and the operator builder's (builder_argv)."""
    if probe.kind != "acl" or not probe.compute:
        return []
    return ["--compute"] + builder_argv(probe, ascend_dir, state_dir, build_timeout_seconds(probe), acl_dir,
                                        atc_argv)


def builder_argv(probe: ProbeConfig, ascend_dir: str, state_dir: str, timeout_seconds: float,
                 acl_dir: Optional[str] = None, atc_argv: Optional[List[str]] = None) -> List[str]:
    """The operator builder's flags (opmodel.add_arguments) for the probe child or the diag child: the model cache
    under the state directory, and the ATC, libascendcl.so and aclnn libraries of the install. A target with its own pyACL
    (`acl_dir`) brings its own ATC (`atc_argv`, or none) and no C library: nothing of a real install."""
    argv = ["--op-cache-dir", os.path.join(state_dir, OP_CACHE_DIR), "--compute-build-timeout", repr(timeout_seconds)]
    atc = atc_argv if acl_dir else [atc_path(probe, ascend_dir)]
    if atc:
        argv += ["--atc-command", json.dumps(atc)]
    if not acl_dir:
        argv += ["--op-library", acl_library(probe, ascend_dir)]
        # the precompiled operators' libraries sit beside libascendcl.so in the toolkit's lib64
        lib64 = os.path.dirname(acl_library(probe, ascend_dir))
        argv += ["--aclnn-library", os.path.join(lib64, "libnnopbase.so"),
                 "--aclnn-library", os.path.join(lib64, "libopapi.so")]
    return argv


def child_argv(probe: ProbeConfig, python: str) -> List[str]:
    """The child's command line without its chips and deadlines (the source appends `--device N` per chip of a
    group, --device-timeout and --not-after)."""
    argv = [python, "-m", CHILD_MODULE, "--kind", probe.kind, "--copy-bytes", str(probe.copy_bytes),
            "--sync-timeout-ms", str(probe.sync_timeout_ms)]
    if probe.kind == "torch":
        argv += ["--matmul-size", str(probe.matmul_size), "--matmul-tolerance", repr(probe.matmul_tolerance)]
    if probe.model is not None:
        model = probe.model
        argv += ["--model", model.path, "--model-input", model.input_file,
                 "--model-expected", model.expected_output_file, "--model-dtype", model.dtype,
                 "--model-tolerance", repr(model.tolerance)]
    return argv


def child_environment(probe: ProbeConfig, ascend_dir: str, inherited: Mapping[str, str], python: str,
                      acl_dir: Optional[str] = None) -> Dict[str, str]:
    """The variables to set for the child on top of `inherited` (the daemon's environment). With `acl_dir`
    (the target's own pyACL), `import acl` finds that runtime there and no real install is added."""
    python_path = [acl_dir] if acl_dir else [acl_python_path(probe, ascend_dir)]
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        python_path.append(PACKAGE_PARENT)
    env = {"PYTHONPATH": _prepend(python_path, inherited.get("PYTHONPATH"))}
    if acl_dir:
        return env
    toolkit = toolkit_dir(probe, ascend_dir)
    env["LD_LIBRARY_PATH"] = _prepend(library_path(probe, ascend_dir), inherited.get("LD_LIBRARY_PATH"))
    # What set_env.sh exports besides the paths; a value the daemon already has (set_env.sh sourced) wins.
    for name, value in (("ASCEND_TOOLKIT_HOME", toolkit), ("ASCEND_HOME_PATH", toolkit),
                        ("ASCEND_OPP_PATH", os.path.join(toolkit, "opp")), ("ASCEND_AICPU_PATH", toolkit)):
        if name not in inherited:
            env[name] = value
    env.update(probe.environment)
    return env


def child_command(probe: ProbeConfig, ascend_dir: str, inherited: Mapping[str, str], state_dir: str,
                  acl_dir: Optional[str] = None, atc_argv: Optional[List[str]] = None
                  ) -> Tuple[List[str], Dict[str, str]]:
    """argv prefix and environment of the probe child."""
    python = sys.executable if acl_dir or not probe.python else probe.python
    return (child_argv(probe, python) + runtime_facts_argv(probe)
            + compute_argv(probe, ascend_dir, state_dir, acl_dir, atc_argv),
            child_environment(probe, ascend_dir, inherited, python, acl_dir))


def runtime_facts_argv(probe: ProbeConfig) -> List[str]:
    """The flag that makes the acl child also report what the runtime sees (probe.runtime_facts). Without it
    the child makes exactly the probe's own calls."""
    return ["--runtime-facts"] if probe.kind == "acl" and probe.runtime_facts else []


def _prepend(entries: List[str], existing: Optional[str]) -> str:
    return os.pathsep.join(entries + ([existing] if existing else []))
