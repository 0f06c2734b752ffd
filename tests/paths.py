"""Where the tests' shared files are, wherever a test file sits in the tree."""

import os

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
FIXTURES = os.path.join(TESTS, "fixtures")  # real npu-smi captures and other inputs, each with its source
PROBE_STUBS = os.path.join(TESTS, "probe_stubs")
