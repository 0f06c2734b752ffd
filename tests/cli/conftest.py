"""Fixtures of the CLI tests."""

import pytest


@pytest.fixture
def run(cli):
    """`npumon ARGS...` in this process (tests/conftest.py's `cli`): (exit code, stdout, stderr)."""
    def call(*args):
        result = cli(*args)
        return result.returncode, result.stdout, result.stderr
    return call
