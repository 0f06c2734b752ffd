"""Each command imports its own module only: `npumon --help` none, `npumon run` not check's, fleet's or top's.

The parser (cli/parser.py) holds every command's options; importing every command's module for every command
cost each daemon start and each `--help` about 0.2 s of CPU. Each case runs in a fresh interpreter, since this
process has imported everything long ago."""

import json
import subprocess
import sys

import pytest

from paths import REPO

# Every command's module: what one command must not import for another.
COMMAND_MODULES = (
    "npumon.cli.check", "npumon.cli.diag", "npumon.cli.top", "npumon.cli.top_feeds", "npumon.cli.top_screen",
    "npumon.cli.run", "npumon.cli.events", "npumon.cli.notify", "npumon.cli.control", "npumon.cli.config",
    "npumon.cli.completion", "npumon.cli.manpage", "npumon.fleet.cli", "npumon.sim.fleet",
)

PROBE = """\
import json, sys
from npumon.cli.main import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as handle:
    json.dump({"code": code, "modules": sorted(sys.modules)}, handle)
"""


def run_probe(tmp_path, *args):
    """(exit code, every module imported) of `npumon ARGS` in a new interpreter."""
    result = tmp_path / "result.json"
    subprocess.run([sys.executable, "-c", PROBE, str(result)] + list(args), cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)
    found = json.loads(result.read_text())
    return found["code"], found["modules"]


def imported_by(tmp_path, *args):
    """(exit code, the command modules imported) of `npumon ARGS` in a new interpreter."""
    code, modules = run_probe(tmp_path, *args)
    return code, [module for module in COMMAND_MODULES if module in modules]


def test_help_imports_no_command_module(tmp_path):
    assert imported_by(tmp_path, "--help") == (0, [])


@pytest.mark.parametrize("args,code,own", [
    (["config", "check", "{file}"], 0, ["npumon.cli.config"]),
    (["scenarios", "--json"], 0, ["npumon.cli.run"]),
    (["run", "--config", "{file}", "--listen", "no-port"], 2, ["npumon.cli.run"]),  # refused after the config
    (["check", "--timeout", "0"], 3, []),  # a usage error: the parser alone
])
def test_a_command_imports_its_own_module_and_no_other(tmp_path, args, code, own):
    config = tmp_path / "npumon.yaml"
    config.write_text("state_dir: {}\n".format(tmp_path / "state"))
    args = [arg.format(file=config) for arg in args]
    assert imported_by(tmp_path, *args) == (code, own)


def test_the_daemon_does_not_import_psutil(tmp_path):
    """Only `npumon control` reads another daemon's process (services/control/statefile.py); importing psutil
    cost every daemon start about 8 ms."""
    config = tmp_path / "npumon.yaml"
    config.write_text("state_dir: {}\n".format(tmp_path / "state"))
    code, modules = run_probe(tmp_path, "run", "--config", str(config), "--listen", "no-port")
    assert code == 2 and "npumon.daemon.daemon" in modules and "npumon.services.control.statefile" in modules
    assert "psutil" not in modules
