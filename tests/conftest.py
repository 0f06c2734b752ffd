"""Fixtures shared by several test files."""

import shutil
import subprocess

import pytest


@pytest.fixture
def certificate(tmp_path):
    """(cert, key): a self-signed EC certificate for 127.0.0.1, in PEM files."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not on PATH; cannot make a test certificate")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    return cert, key
