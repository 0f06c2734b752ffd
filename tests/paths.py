"""Where the tests' shared files are, wherever a test file sits in the tree."""

import os

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
FIXTURES = os.path.join(TESTS, "fixtures")  # real npu-smi captures and other inputs, each with its source
PROBE_STUBS = os.path.join(TESTS, "probe_stubs")


def sticky_ancestor(path):
    """The nearest directory above `path` that anyone may write to, with the sticky bit: /tmp, or /dev/shm where
    the suite keeps its temporary files (tests/conftest.py)."""
    directory = os.path.dirname(os.path.abspath(str(path)))
    while not os.stat(directory).st_mode & 0o1002 == 0o1002:
        if directory == os.path.dirname(directory):
            raise AssertionError("no world-writable sticky directory above {}".format(path))
        directory = os.path.dirname(directory)
    return directory
