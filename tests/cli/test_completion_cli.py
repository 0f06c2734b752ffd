"""`npumon completion bash` (run by a real bash) and the npumon(1) man page (checked by groff and man), both
generated from the argument parser; and the packaging build that installs the page."""

import os
import shutil
import subprocess
import sys

import pytest

from npumon.cli.main import build_parser
from npumon.cli.completion import bash_script, fish_script, zsh_script
from npumon.cli.manpage import man_page
from npumon.cli.parser_walk import walk
from npumon.sim import list_scenarios
from paths import REPO

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("completion") / "npumon.bash"
    path.write_text(bash_script(build_parser()))
    return str(path)


def complete(script, *words):
    """What bash offers for the command line `words` (the last one is the word being completed)."""
    program = 'source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _npumon; printf "%s\\n" "${COMPREPLY[@]}"'
    proc = subprocess.run(["bash", "-c", program, script, *words], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [line for line in proc.stdout.splitlines() if line]


@needs_bash
def test_bash_completes_commands_subcommands_options_and_values(script):
    assert complete(script, "npumon", "con") == ["control", "config"]
    assert complete(script, "npumon", "control", "") == ["status", "fan", "power"]
    assert complete(script, "npumon", "config", "") == ["check", "show"]
    assert complete(script, "npumon", "check", "--log-level", "") == ["debug", "info", "warning", "error"]
    assert complete(script, "npumon", "check", "--simulate", "=", "overh") == ["overheat"]
    assert complete(script, "npumon", "run", "--simulate", "=") == list_scenarios()
    assert complete(script, "npumon", "run", "--sim-product", "atlas-a") == ["atlas-a3"]
    assert complete(script, "npumon", "check", "--simulate", "--js") == ["--json"]
    # options and their values are skipped when finding the command: -c FILE before the subcommand
    assert complete(script, "npumon", "control", "-c", "x.yaml", "power", "--l") == ["--log-level", "--list"]
    assert complete(script, "npumon", "events", "--since", "") == []  # a free value: nothing to offer


@needs_bash
def test_file_options_complete_file_names(script, tmp_path):
    (tmp_path / "npumon.yaml").write_text("")
    assert complete(script, "npumon", "check", "--config", str(tmp_path / "npu")) == [str(tmp_path / "npumon.yaml")]


def test_every_command_and_option_of_the_parser_is_in_both(script):
    parser = build_parser()
    commands = walk(parser)
    with open(script, encoding="utf-8") as handle:
        completion = handle.read()
    options_table = completion.split("declare -gA _npumon_opts=(\n")[1].split("\n)\n")[0].splitlines()
    options_of = {line.split("]=")[0].strip(" ['"): line.split("]=")[1].strip("'").split() for line in options_table}
    page = man_page(parser)
    for command in commands[1:]:
        assert ".SS " + command.name.replace("-", "\\-") in page
        assert options_of[command.name] == [flag for option in command.options for flag in option.flags]
    # a command added to the parser appears without an edit to either generator
    subcommands = next(action for action in parser._actions if action.dest == "command")
    subcommands.add_parser("brand-new", help="x").add_argument("--shiny-option")
    assert "--shiny-option" in bash_script(parser) and "brand\\-new" in man_page(parser)


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_the_man_page_is_valid_roff(tmp_path):
    page = tmp_path / "npumon.1"
    page.write_text(man_page(build_parser(), date="2026-01-01"))
    proc = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""  # -ww: every warning; -z: no output, only the check
    if shutil.which("man") is not None:
        shown = subprocess.run(["man", "--warnings", "-l", str(page)], capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, MANWIDTH="100", MANPAGER="cat", PAGER="cat", LC_ALL="C.UTF-8"))
        assert shown.returncode == 0 and shown.stderr == "", shown.stderr
        assert "npumon config check" in shown.stdout and "/etc/npumon/npumon.yaml" in shown.stdout


@pytest.mark.slow
@pytest.mark.integration
def test_pip_install_puts_the_generated_man_page_in_share_man(tmp_path):
    """The build step of setup.py writes the page and install_data installs it into a fresh venv (the build
    uses this interpreter's setuptools and npumon's requirements, so it needs no package index)."""
    source = tmp_path / "src"
    shutil.copytree(REPO, str(source), ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                                     ".hypothesis", "node_modules"))
    # A venv of its own, so that pip never touches the npumon installed for this interpreter; it sees this
    # interpreter's pip, setuptools and npumon's requirements through the system site packages.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed",
                          "--no-build-isolation", "--no-index", str(source)], capture_output=True, text=True,
                         timeout=600)
    assert pip.returncode == 0, pip.stderr
    page = venv / "share" / "man" / "man1" / "npumon.1"
    assert page.read_text().startswith(".TH NPUMON 1 ")


def test_the_commands_print_what_the_generators_make(capsys, monkeypatch):
    from npumon.cli.main import main

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # 2026-01-01: a reproducible page
    assert main(["manpage"]) == 0
    assert capsys.readouterr().out == man_page(build_parser(), date="2026-01-01")
    assert main(["completion", "bash"]) == 0
    assert capsys.readouterr().out == bash_script(build_parser())


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_through_bashcompinit(tmp_path):
    script = tmp_path / "npumon.zsh"
    script.write_text(zsh_script(build_parser()))
    # zsh's bash layer fills COMP_WORDS from zsh's words; here as it would, then the function is called
    program = ('autoload -U compinit && compinit -u -D; source "$1"; shift; COMP_WORDS=("$@"); '
               'COMP_CWORD=$(($# - 1)); _npumon; print -l -- "${COMPREPLY[@]}"')

    def offered(*words):
        proc = subprocess.run(["zsh", "-f", "-c", program, "zsh", str(script), *words], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        return [line for line in proc.stdout.splitlines() if line]

    assert offered("npumon", "control", "") == ["status", "fan", "power"]
    # zsh's compgen offers every word and its compadd keeps those that match what is typed
    assert "--timeout" in offered("npumon", "check", "--timeo") and "status" not in offered("npumon", "check", "")
    assert offered("npumon", "check", "--log-level", "") == ["debug", "info", "warning", "error"]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_commands_options_and_values(tmp_path):
    script = tmp_path / "npumon.fish"
    script.write_text(fish_script(build_parser()))

    def offered(line):
        proc = subprocess.run(["fish", "--no-config", "-c", "source $argv[1]; complete -C $argv[2]", str(script),
                               line], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        return [entry.split("\t")[0] for entry in proc.stdout.splitlines()]

    assert offered("npumon control ") == ["fan", "power", "status"]
    assert "--timeout" in offered("npumon check --time")
    assert offered("npumon check --log-level ") == ["debug", "error", "info", "warning"]
    assert "overheat" in offered("npumon check --simulate ")
    assert "status" not in offered("npumon check ")  # control's subcommands only under control
