"""The `probe:` config section (one-line errors naming file, line and key) and the child's environment."""

import os
import sys

import pytest

from npumon.config.errors import ConfigError
from npumon.settings import load_config, parse_config
from npumon.sources.probe.config import ProbeConfig
from npumon.sources.probe.launch import PACKAGE_PARENT, child_argv, child_command, child_environment


def _error(text, tmp_path):
    path = tmp_path / "npumon.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    message = str(info.value)
    assert "\n" not in message
    return message.replace(str(path), "FILE")


def test_defaults():
    probe = parse_config("", "x.yaml").probe
    assert probe == ProbeConfig()
    assert (probe.enabled, probe.interval_seconds, probe.jitter_seconds, probe.timeout_seconds) == (True, 300, 30, 30)
    assert (probe.skip_busy_above_ratio, probe.kind, probe.max_concurrent) == (0.8, "acl", 2)


def test_values_are_read(tmp_path):
    for name in ("m.om", "in.bin", "out.bin"):
        (tmp_path / name).write_bytes(b"x")
    config = parse_config(
        "probe:\n  interval_seconds: 600\n  skip_busy_above_ratio: null\n  environment: {{ASCEND_GLOBAL_LOG_LEVEL: '3'}}\n"
        "  library_path: [/opt/cann/lib64]\n"
        "  model:\n    path: {0}/m.om\n    input_file: {0}/in.bin\n    expected_output_file: {0}/out.bin\n"
        "    dtype: float16\n    tolerance: 0.01\n".format(tmp_path), "x.yaml")
    probe = config.probe
    assert probe.interval_seconds == 600.0 and probe.skip_busy_above_ratio is None
    assert probe.environment == {"ASCEND_GLOBAL_LOG_LEVEL": "3"} and probe.library_path == ["/opt/cann/lib64"]
    assert (probe.model.dtype, probe.model.tolerance) == ("float16", 0.01)


@pytest.mark.parametrize("text, expected", [
    ("probe:\n  kind: pytorch\n", "FILE:2: probe.kind: must be one of acl, torch"),
    ("probe:\n  interval_seconds: 0\n", "FILE:2: probe.interval_seconds: must be greater than 0 (use enabled: false"),
    ("probe:\n  skip_busy_above_ratio: 80\n", "FILE:2: probe.skip_busy_above_ratio: must be a ratio from 0 to 1"),
    ("probe:\n  timeout_seconds: 90\n", "FILE:2: probe.round_timeout_seconds: must be at least probe.timeout_seconds"),
    ("probe:\n  sync_timeout_ms: 30000\n", "FILE:2: probe.sync_timeout_ms: must be shorter than probe.timeout_seconds"),
    ("probe:\n  python: /nonexistent/python3.7\n", "FILE:2: probe.python: not an executable file"),
    ("probe:\n  baseline_runs: 1\n", "FILE:2: probe.baseline_runs: must be at least 3"),
    ("probe:\n  max_concurrent: 0\n", "FILE:2: probe.max_concurrent: must be at least 1"),
    ("probe:\n  copy_bytes: 0\n", "FILE:2: probe.copy_bytes: must be from 1"),
    ("probe:\n  model:\n    path: /nonexistent.om\n", "FILE:3: probe.model.path: no such file: /nonexistent.om"),
    ("probe:\n  model: {}\n", "FILE:2: probe.model.path: required"),
    ("probe:\n  enabled: yes please\n", "FILE:2: probe.enabled: expected a boolean"),
    ("probe:\n  colour: blue\n", "FILE:2: probe.colour: unknown key"),
])
def test_mistakes_are_one_line_with_file_line_and_key(tmp_path, text, expected):
    assert _error(text, tmp_path).startswith(expected)


def test_a_model_needs_the_acl_probe(tmp_path):
    for name in ("m.om", "in.bin", "out.bin"):
        (tmp_path / name).write_bytes(b"x")
    text = ("probe:\n  kind: torch\n  model:\n    path: {0}/m.om\n    input_file: {0}/in.bin\n"
            "    expected_output_file: {0}/out.bin\n    dtype: bfloat\n".format(tmp_path))
    assert _error(text, tmp_path) == "FILE:3: probe.model: only the acl probe runs a model (probe.kind is torch)"


# -- the child's command and environment ---------------------------------------------------------------


def test_real_host_environment_follows_set_env_sh_under_ascend_dir():
    env = child_environment(ProbeConfig(), "/usr/local/Ascend", {"PYTHONPATH": "/site", "PATH": "/bin"},
                            sys.executable)
    toolkit = "/usr/local/Ascend/ascend-toolkit/latest"
    assert env["PYTHONPATH"] == toolkit + "/python/site-packages" + os.pathsep + "/site"
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [
        "/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64/common",
        "/usr/local/Ascend/driver/lib64/driver", toolkit + "/lib64", toolkit + "/lib64/plugin/opskernel",
        toolkit + "/lib64/plugin/nnengine"]
    assert env["ASCEND_OPP_PATH"] == toolkit + "/opp" and env["ASCEND_TOOLKIT_HOME"] == toolkit


def test_configured_paths_and_variables_win_and_an_inherited_set_env_is_kept():
    probe = ProbeConfig(toolkit_dir="/opt/cann", acl_python_path="/opt/pyacl", library_path=["/opt/lib"],
                        environment={"ASCEND_GLOBAL_LOG_LEVEL": "3"})
    env = child_environment(probe, "/usr/local/Ascend", {"ASCEND_OPP_PATH": "/sourced/opp", "LD_LIBRARY_PATH": "/x"},
                            sys.executable)
    assert env["PYTHONPATH"] == "/opt/pyacl"
    assert env["LD_LIBRARY_PATH"] == "/opt/lib" + os.pathsep + "/x"
    assert "ASCEND_OPP_PATH" not in env  # the daemon's own (set_env.sh sourced) value stays
    assert env["ASCEND_HOME_PATH"] == "/opt/cann" and env["ASCEND_GLOBAL_LOG_LEVEL"] == "3"


def test_another_python_gets_the_npumon_package_on_its_path(tmp_path):
    env = child_environment(ProbeConfig(), "/usr/local/Ascend", {}, "/usr/bin/python3.7")
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == PACKAGE_PARENT
    assert os.path.isfile(os.path.join(PACKAGE_PARENT, "npumon", "sources", "probe", "child.py"))


def test_simulation_gets_the_simulated_runtime_and_nothing_of_a_real_install():
    argv, env = child_command(ProbeConfig(python="/usr/bin/python3.7"), "/usr/local/Ascend", {}, "/state", "/sim/acl")
    assert argv[:3] == [sys.executable, "-m", "npumon.sources.probe.child"]
    assert env == {"PYTHONPATH": "/sim/acl"}


def test_child_argv_carries_the_settings():
    from npumon.sources.probe.config import ProbeModelConfig

    model = ProbeModelConfig(path="/m.om", input_file="/i", expected_output_file="/o", tolerance=0.5)
    argv = child_argv(ProbeConfig(copy_bytes=4096, sync_timeout_ms=2000, model=model), "/py")
    assert argv == ["/py", "-m", "npumon.sources.probe.child", "--kind", "acl", "--copy-bytes", "4096",
                    "--sync-timeout-ms", "2000", "--model", "/m.om", "--model-input", "/i", "--model-expected",
                    "/o", "--model-dtype", "float32", "--model-tolerance", "0.5"]
    torch_argv = child_argv(ProbeConfig(kind="torch", matmul_size=32), "/py")
    assert torch_argv[-4:] == ["--matmul-size", "32", "--matmul-tolerance", "0.01"]
