"""`npumon run` with a web config file (--web-config-file, exporter.web_config_file): refused at start in one
line, read again on SIGHUP, and a bad one refused on reload with the previous one kept."""

import signal

import bcrypt
import requests

from daemon_harness import STOP_BOUND_SECONDS, one_error_line, wait_until

CONFIG = "state_dir: {state}\npoll:\n  table_seconds: 0.5\n"


def hashed(password):
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()


def config(tmp_path, extra=""):
    path = tmp_path / "npumon.yaml"
    path.write_text(CONFIG.format(state=tmp_path / "state") + extra)
    return str(path)


def test_a_bad_web_config_stops_the_start_in_one_line(tmp_path, daemons):
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users:\n  prometheus: plaintext\n")
    line = one_error_line(daemons("--simulate", "--listen", "127.0.0.1:0", "--config", config(tmp_path),
                                  "--web-config-file", str(web)))
    assert line.startswith("npumon: {}:2: basic_auth_users.prometheus: not a bcrypt hash".format(web))
    # the same file named by the config
    line = one_error_line(daemons("--simulate", "--listen", "127.0.0.1:0",
                                  "--config", config(tmp_path, "exporter:\n  web_config_file: {}\n".format(web))))
    assert line.startswith("npumon: {}:2: basic_auth_users.prometheus:".format(web))


def test_tls_in_the_config_and_in_the_web_config_is_refused(tmp_path, daemons, certificate):
    cert, key = certificate
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: {}\n  key_file: {}\n".format(cert, key))
    path = config(tmp_path, "exporter:\n  tls_cert_file: {}\n  tls_key_file: {}\n".format(cert, key))
    line = one_error_line(daemons("--simulate", "--listen", "127.0.0.1:0", "--config", path,
                                  "--web-config-file", str(web)))
    assert line == "npumon: {}: exporter.tls_cert_file: TLS is set both here and in the web config {}; " \
                   "keep one".format(path, web)


def test_sighup_reads_the_web_config_again_and_keeps_the_old_one_when_the_new_is_bad(tmp_path, daemons):
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users:\n  prometheus: '{}'\n".format(hashed("first")))
    daemon = daemons("--simulate", "--listen", "127.0.0.1:0", "--config", config(tmp_path),
                     "--web-config-file", str(web))
    daemon.wait_serving()

    def status(password, path="/metrics"):
        return requests.get(daemon.url(path), auth=("prometheus", password) if password else None,
                            timeout=5).status_code

    assert (status("first"), status("second"), status(None, "/healthz")) == (200, 401, 200)

    web.write_text("basic_auth_users:\n  prometheus: '{}'\n".format(hashed("second")))
    mark = len(daemon.lines)
    daemon.signal(signal.SIGHUP)
    daemon.wait_for_line("config reloaded from", start=mark)
    assert (status("first"), status("second")) == (401, 200)

    web.write_text("basic_auth_users:\n  prometheus: '{}'\ntls_server_config:\n  cert_file: x.pem\n".format(
        hashed("third")))
    mark = len(daemon.lines)
    daemon.signal(signal.SIGHUP)
    refused = daemon.wait_for_line("reload refused", start=mark).string
    assert refused.endswith("{}:4: tls_server_config.key_file: TLS needs key_file (the server certificate's key, "
                            "PEM)".format(web))
    assert (status("second"), status("third")) == (200, 401)  # still the previous web config, still plain HTTP
    assert not [line for line in daemon.lines if "Traceback" in line]
    wait_until(lambda: requests.get(daemon.url("/metrics"), auth=("prometheus", "second"), timeout=5).ok)
    assert daemon.stop() < STOP_BOUND_SECONDS and daemon.proc.returncode == 0
