"""Certificates for TLS tests, made with the openssl command: a CA, a server certificate for 127.0.0.1
signed by it, client certificates signed by it, and a client certificate from another CA."""

import os
import shutil
import subprocess
from typing import NamedTuple

import pytest


class PKI(NamedTuple):
    ca: str  # the CA certificate that signs the server and the good clients
    server_cert: str
    server_key: str
    client_cert: str  # SAN DNS:prometheus, IP:127.0.0.1
    client_key: str
    other_client_cert: str  # SAN DNS:intruder, signed by the same CA
    other_client_key: str
    foreign_client_cert: str  # signed by another CA
    foreign_client_key: str


def _openssl(*args: str) -> None:
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=30)


def _ec_key(path: str) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", path)


def _ca(directory: str, name: str):
    key, cert = os.path.join(directory, name + ".key"), os.path.join(directory, name + ".pem")
    _ec_key(key)
    _openssl("req", "-x509", "-new", "-key", key, "-out", cert, "-days", "1", "-subj", "/CN=" + name,
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    return cert, key


def _signed(directory: str, name: str, ca, extensions: str):
    key, csr, cert = (os.path.join(directory, name + suffix) for suffix in (".key", ".csr", ".pem"))
    ext = os.path.join(directory, name + ".ext")
    with open(ext, "w", encoding="utf-8") as handle:
        handle.write(extensions)
    _ec_key(key)
    _openssl("req", "-new", "-key", key, "-out", csr, "-subj", "/CN=" + name)
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-out", cert,
             "-days", "1", "-extfile", ext)
    return cert, key


def make_pki(directory: str) -> PKI:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not on PATH; cannot make test certificates")
    os.makedirs(directory, exist_ok=True)
    ca = _ca(directory, "ca")
    foreign_ca = _ca(directory, "foreign-ca")
    server = _signed(directory, "server", ca, "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    client = _signed(directory, "prometheus", ca,
                     "subjectAltName=DNS:prometheus,IP:127.0.0.1\nextendedKeyUsage=clientAuth\n")
    other = _signed(directory, "intruder", ca, "subjectAltName=DNS:intruder\nextendedKeyUsage=clientAuth\n")
    foreign = _signed(directory, "foreign", foreign_ca, "subjectAltName=DNS:prometheus\nextendedKeyUsage=clientAuth\n")
    return PKI(ca[0], server[0], server[1], client[0], client[1], other[0], other[1], foreign[0], foreign[1])
