"""Every test has a state directory of its own, and a run that changes a guarded directory fails."""

import os
import subprocess
import sys
import textwrap

import pytest

from npumon.config.schema import DEFAULT_STATE_DIR
from npumon.settings import Config

TESTS = os.path.dirname(os.path.abspath(__file__))


def test_a_test_runs_with_an_empty_state_dir_of_its_own_and_npumon_processes_inherit_it():
    state_dir = Config().state_dir
    assert state_dir != DEFAULT_STATE_DIR and os.path.isdir(state_dir) and os.listdir(state_dir) == []
    child = subprocess.run([sys.executable, "-c", "from npumon.settings import Config; print(Config().state_dir)"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert child.stdout.strip() == state_dir


def _run_guarded(where, test_body, *options):
    """Run test_body as a pytest session, in its own process, with StateGuard on where/guarded (and the tests
    test_other_N, which only read it, when options ask for xdist workers to share them out)."""
    guarded = where / "guarded"
    guarded.mkdir(parents=True)
    (guarded / "kept.json").write_text("{}")
    project = where / "project"
    project.mkdir()
    (project / "conftest.py").write_text(textwrap.dedent("""\
        from state_guard import StateGuard

        def pytest_configure(config):
            config.pluginmanager.register(StateGuard({!r}))
        """.format(str(guarded))))
    (project / "test_one.py").write_text("import os\nGUARDED = {!r}\n\ndef test_one():\n".format(str(guarded))
                                         + textwrap.indent(test_body, "    ") + "\n")
    (project / "test_other.py").write_text("import os, pytest\nGUARDED = {!r}\n\n".format(str(guarded))
                                           + "@pytest.mark.parametrize('n', range(4))\ndef test_other(n):\n"
                                           + "    assert 'kept.json' in os.listdir(GUARDED)\n")
    # no plugin but the guard (and xdist where asked): the installed ones (hypothesis, ...) only slow each start
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]),
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options,
                           str(project / "test_one.py")] + ([str(project / "test_other.py")] if options else []),
                          cwd=str(project), env=env, capture_output=True, text=True, timeout=120)


def test_the_run_fails_naming_each_path_a_test_created_modified_or_removed(tmp_path):
    result = _run_guarded(tmp_path / "write", textwrap.dedent("""\
        open(os.path.join(GUARDED, "cursor.json"), "w").close()
        os.utime(os.path.join(GUARDED, "kept.json"), (1, 1))"""))
    guarded = str(tmp_path / "write" / "guarded")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert "{} changed during the run".format(guarded) in result.stdout
    assert os.path.join(guarded, "cursor.json") + ": created" in result.stdout
    assert os.path.join(guarded, "kept.json") + ": modified" in result.stdout

    result = _run_guarded(tmp_path / "remove", 'os.remove(os.path.join(GUARDED, "kept.json"))')
    assert result.returncode == 1, result.stdout + result.stderr
    assert os.path.join(str(tmp_path / "remove" / "guarded"), "kept.json") + ": removed" in result.stdout


def test_a_run_that_only_reads_the_guarded_directory_passes(tmp_path):
    result = _run_guarded(tmp_path, 'assert os.listdir(GUARDED) == ["kept.json"]')
    assert result.returncode == 0, result.stdout + result.stderr
    assert "changed during the run" not in result.stdout


def test_under_xdist_the_guard_runs_once_in_the_controller_and_still_fails_the_run(tmp_path):
    pytest.importorskip("xdist")
    result = _run_guarded(tmp_path / "write", 'open(os.path.join(GUARDED, "cursor.json"), "w").close()',
                          "-p", "xdist.plugin", "-n", "2")
    guarded = str(tmp_path / "write" / "guarded")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "5 passed" in result.stdout and "bringing up nodes" in result.stdout, result.stdout
    assert result.stdout.count("{} changed during the run".format(guarded)) == 1, result.stdout
    assert result.stdout.count(os.path.join(guarded, "cursor.json") + ": created") == 1, result.stdout

    result = _run_guarded(tmp_path / "read", 'assert "kept.json" in os.listdir(GUARDED)', "-p", "xdist.plugin",
                          "-n", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout and "changed during the run" not in result.stdout, result.stdout
