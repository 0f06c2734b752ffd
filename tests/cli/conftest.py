"""Fixtures of the CLI tests."""

import pytest

from npumon.cli.main import main


@pytest.fixture
def run(capsys):
    """`npumon ARGS...` in this process: (exit code, stdout, stderr)."""
    def call(*args):
        code = main(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return call
