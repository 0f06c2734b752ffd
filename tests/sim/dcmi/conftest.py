"""The simulated libdcmi.so, built once per test session with the system compiler (the tests skip
when there is none)."""

import pytest

from npumon.sim.dcmi.build import FakeDcmiBuildError, build_fake_library, find_compiler


@pytest.fixture(scope="session")
def fake_dcmi_library(tmp_path_factory):
    if find_compiler() is None:
        pytest.skip("no C compiler (cc or gcc) to build the simulated libdcmi.so")
    try:
        return build_fake_library(str(tmp_path_factory.mktemp("fake-dcmi")))
    except FakeDcmiBuildError as exc:
        pytest.fail(str(exc))
