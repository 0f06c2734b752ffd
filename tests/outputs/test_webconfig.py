"""Loading exporter-toolkit web config files: what is honoured, and what is refused in one line."""

import os
import ssl
import sys

import bcrypt
import pytest

from npumon.outputs.webconfig import WebConfigError, load_web_config
from pki import make_pki

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("pki")))


def write(tmp_path, text, name="web.yml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def tls_block(pki, extra=""):
    return "tls_server_config:\n  cert_file: {}\n  key_file: {}\n{}".format(pki.server_cert, pki.server_key, extra)


def test_an_empty_file_enforces_nothing(tmp_path):
    security = load_web_config(write(tmp_path, ""))
    assert security.tls is None and security.users == () and security.headers == ()


def test_a_node_exporter_style_file_loads(tmp_path, pki):
    text = tls_block(pki, "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n"
                          "  client_allowed_sans: [prometheus]\n  min_version: TLS13\n".format(pki.ca))
    text += "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n" \
            "    Strict-Transport-Security: max-age=31536000\n    Content-Security-Policy: ''\n"
    text += "basic_auth_users:\n  prometheus: '{}'\n  alice: '{}'\n".format(HASH, HASH.replace("$2b$", "$2y$"))
    security = load_web_config(write(tmp_path, text))
    assert security.tls.verify_mode == ssl.CERT_REQUIRED
    assert security.tls.minimum_version == ssl.TLSVersion.TLSv1_3
    assert [ca["subject"] for ca in security.tls.get_ca_certs()] == [((("commonName", "ca"),),)]
    assert security.client_allowed_sans == {"prometheus"}
    assert [user for user, _ in security.users] == [b"prometheus", b"alice"]
    # a blank header is unset, as in exporter-toolkit
    assert security.headers == (("X-Frame-Options", "deny"), ("Strict-Transport-Security", "max-age=31536000"))


def test_relative_file_names_are_relative_to_the_web_config(tmp_path, pki):
    directory = os.path.dirname(pki.server_cert)
    text = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n" \
           "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.pem\n"
    path = os.path.join(directory, "web.yml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    assert load_web_config(path).tls.verify_mode == ssl.CERT_OPTIONAL


def test_cipher_suites_curves_and_preference_are_applied(tmp_path, pki):
    text = tls_block(pki, "  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, "
                          "TLS_AES_128_GCM_SHA256]\n  curve_preferences: [CurveP384]\n"
                          "  prefer_server_cipher_suites: false\n")
    context = load_web_config(write(tmp_path, text)).tls
    tls12 = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES128-GCM-SHA256"]
    assert not context.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    assert load_web_config(write(tmp_path, tls_block(pki), "default.yml")).tls.options & ssl.OP_CIPHER_SERVER_PREFERENCE


REFUSED = [
    ("tls_server_config: {{cert_file: {cert}, key_file: {key}, clent_auth_type: NoClientCert}}",
     r":1: tls_server_config.clent_auth_type: unknown key"),
    ("basic_auth_users: {{a: '{hash}'}}\nextra: 1", r":2: extra: unknown key"),
    ("{tls}  client_auth_type: RequestClientCert\n  client_ca_file: {ca}",
     r":4: tls_server_config.client_auth_type: RequestClientCert takes client certificates without verifying"),
    ("{tls}  client_auth_type: RequireAnyClientCert\n",
     r":4: tls_server_config.client_auth_type: RequireAnyClientCert takes client certificates without"),
    ("{tls}  client_auth_type: VerifyAlways\n", r":4: tls_server_config.client_auth_type: unknown policy 'VerifyAlways'"),
    ("{tls}  client_ca_file: {ca}\n", r"client_auth_type: client CAs are set but the policy is NoClientCert"),
    ("{tls}  client_auth_type: RequireAndVerifyClientCert\n",
     r"tls_server_config.client_ca_file: RequireAndVerifyClientCert needs client_ca_file"),
    ("{tls}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {ca}\n  client_allowed_sans: [x]\n",
     r"client_allowed_sans: needs client_auth_type RequireAndVerifyClientCert"),
    ("{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {key}\n",
     r"tls_server_config.client_ca_file: cannot load the client CA"),
    ("tls_server_config:\n  cert_file: {cert}\n  key: secret\n", r":3: tls_server_config.key: inline .* not supported"),
    ("tls_server_config:\n  cert_file: {cert}\n", r":2: tls_server_config.key_file: TLS needs key_file"),
    ("tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n",
     r"tls_server_config.cert_file: TLS needs cert_file"),
    ("tls_server_config:\n  cert_file: missing.pem\n  key_file: {key}\n",
     r":2: tls_server_config.cert_file: cannot load certificate .*missing.pem"),
    ("{tls}  min_version: TLS14\n", r":4: tls_server_config.min_version: unknown TLS version 'TLS14'"),
    ("{tls}  min_version: TLS13\n  max_version: TLS12\n", r"tls_server_config.min_version: is above max_version"),
    ("{tls}  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", r"cipher_suites: unknown cipher suite 'TLS_RSA_WITH_RC4"),
    ("{tls}  curve_preferences: [X25519, CurveP256]\n", r"curve_preferences: .* one curve only"),
    ("{tls}  curve_preferences: [Curve25519]\n", r"curve_preferences: unknown curve 'Curve25519'"),
    ("rate_limit:\n  interval: 1s\n  burst: 20\n", r":1: rate_limit: not supported"),
    ("http_server_config:\n  headers:\n    Server: npumon\n", r":3: http_server_config.headers.Server: this header"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
     r":3: http_server_config.headers.X-Frame-Options: must be one of deny, sameorigin"),
    ("basic_auth_users:\n  alice: plaintext\n", r":2: basic_auth_users.alice: not a bcrypt hash"),
    ("basic_auth_users:\n  'a:b': '{hash}'\n", r":2: basic_auth_users.a:b: a user name cannot contain ':'"),
    ("basic_auth_users: [alice]\n", r":1: basic_auth_users: expected a mapping"),
    ("tls_server_config: [\n", r":2: bad YAML"),
]


@pytest.mark.parametrize("text, message", REFUSED)
def test_refused_in_one_line_naming_file_line_and_key(tmp_path, pki, text, message):
    path = write(tmp_path, text.format(tls=tls_block(pki), cert=pki.server_cert, key=pki.server_key, ca=pki.ca,
                                       hash=HASH))
    with pytest.raises(WebConfigError, match=r"^" + str(tmp_path / "web.yml") + r".*" + message) as info:
        load_web_config(path)
    assert "\n" not in str(info.value)


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(WebConfigError, match=r"missing.yml: cannot read web config: No such file"):
        load_web_config(str(tmp_path / "missing.yml"))


def test_basic_auth_without_bcrypt_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "bcrypt", None)  # what `import bcrypt` meets where it is not installed
    with pytest.raises(WebConfigError, match=r":1: basic_auth_users: needs the bcrypt package: "
                                             r"pip install 'npumon\[auth\]'$"):
        load_web_config(write(tmp_path, "basic_auth_users:\n  alice: '{}'\n".format(HASH)))
