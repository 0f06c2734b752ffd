"""The DCMI source's tests run against the simulated libdcmi.so (tests/conftest.py builds it once)."""

import pytest


@pytest.fixture
def library(fake_dcmi_library):
    return fake_dcmi_library
