"""A receiver that echoes the request -- its Authorization header, its URL, its body -- in an error answer
must not put any secret into what npumon stores or prints: the daemon's log, the outbox file, the event
history file, `npumon events` and `npumon notify test`. The daemon runs as a real process, both commands
through the CLI's main() in the test's process (output and exit code as the executable's, without an
interpreter start), against one echoing HTTP server on 127.0.0.1; every receiver type is configured, with
basic auth in a URL, a bearer token, tokens in URL paths and queries, signing secrets and a routing key."""

import base64
import glob
import json
import os
import sqlite3
from urllib.parse import parse_qs, quote, quote_plus, unquote

from daemon_harness import DaemonProcess
from recording_server import RecordingServer

ERROR_TEXT_LIMIT_BYTES = 512  # the documented cap (redact.ERROR_TEXT_LIMIT_BYTES; written out, the README's figure)

BASIC_USER, BASIC_PASSWORD = "npumon-ops", "Pa$$w0rd+/=1"  # in the URL as Pa%24%24w0rd%2B%2F%3D1
BEARER = "b3arer+Tok/en=42xyz"
DINGTALK_TOKEN, DINGTALK_SECRET = "dt0k3n-abcdef123456", "SECdingtalk+sign/secret=="
FEISHU_TOKEN, FEISHU_SECRET = "fs-hook-token-7d3c9a", "feishu-s3cret-value"
WECOM_KEY = "wc-key-0a1b2c3d4e"
SLACK_PATH = "T0SLACK01/B0SLACK02/slackSecretPart99"
PD_KEY = "pd-routing-key-R0ut1ng"
SECRET_ENV = {"NPUMON_TEST_ECHO_BEARER": BEARER, "NPUMON_TEST_ECHO_DINGTALK_URL": None,
              "NPUMON_TEST_ECHO_DINGTALK_SECRET": DINGTALK_SECRET, "NPUMON_TEST_ECHO_PD_KEY": PD_KEY}
RECEIVERS = ("basic", "bearer", "dingtalk", "feishu", "wecom", "slack", "pagerduty")
PADDING = "错误详情" * 300  # past the cap, in bytes and in characters alike


def echo(request):
    """500 (retried) or 400 (refused) answering with what came in: the header, the URL as sent and
    decoded, basic auth decoded, the body -- then a long tail."""
    authorization = request.headers.get("Authorization", "")
    decoded = ""
    if authorization.startswith("Basic "):
        decoded = base64.b64decode(authorization[6:]).decode("utf-8")
    url = request.path + ("?" + request.query if request.query else "")
    text = "authorization={} decoded={} url={} unquoted={} body={} {}".format(
        authorization, decoded, url, unquote(url), request.body.decode("utf-8")[:300], PADDING)
    status = 500 if request.path.startswith(("/basic", "/robot", "/cgi-bin")) else 400
    return status, {"Content-Type": "text/plain; charset=utf-8"}, text.encode("utf-8")


def config_text(tmp_path, server):
    feishu_file = tmp_path / "feishu.url"
    feishu_file.write_text(server.url("/open-apis/bot/v2/hook/" + FEISHU_TOKEN) + "\n")
    basic = "http://{}:{}@127.0.0.1:{}/basic".format(BASIC_USER, quote(BASIC_PASSWORD, safe=""), server.port)
    return """\
state_dir: {state}
log_level: debug
poll: {{table_seconds: 0.3, usages_seconds: 0.5, power_seconds: 0.5, health_seconds: 0.5, ecc_seconds: 1,
        board_seconds: 1, host_seconds: 0.5}}
notify:
  retry_initial_seconds: 1
  receivers:
    - {{name: basic, type: webhook, url: '{basic}'}}
    - {{name: bearer, type: alertmanager, url: '{base}', bearer_token_env: NPUMON_TEST_ECHO_BEARER}}
    - {{name: dingtalk, type: dingtalk, url_env: NPUMON_TEST_ECHO_DINGTALK_URL,
        secret_env: NPUMON_TEST_ECHO_DINGTALK_SECRET}}
    - {{name: feishu, type: feishu, url_file: '{feishu}', secret: '{feishu_secret}'}}
    - {{name: wecom, type: wecom, url: '{base}/cgi-bin/webhook/send?key={wecom}'}}
    - {{name: slack, type: slack, url: '{base}/services/{slack}'}}
    - {{name: pagerduty, type: pagerduty, url: '{base}/v2/enqueue', routing_key_env: NPUMON_TEST_ECHO_PD_KEY}}
""".format(state=tmp_path / "state", basic=basic, base=server.url("").rstrip("/"), feishu=feishu_file,
           feishu_secret=FEISHU_SECRET, wecom=WECOM_KEY, slack=SLACK_PATH)


def forbidden_forms(server):
    """Every configured secret in each form it travelled in or may be echoed in, and each signature
    npumon computed for the requests the server saw."""
    secrets = [BASIC_PASSWORD, "{}:{}".format(BASIC_USER, BASIC_PASSWORD), BEARER, DINGTALK_TOKEN, DINGTALK_SECRET,
               FEISHU_TOKEN, FEISHU_SECRET, WECOM_KEY, SLACK_PATH, "slackSecretPart99", PD_KEY,
               base64.b64encode("{}:{}".format(BASIC_USER, BASIC_PASSWORD).encode()).decode()]
    for request in server.requests:
        secrets += parse_qs(request.query).get("sign", [])
        if request.path.startswith("/open-apis"):
            secrets.append(request.json()["sign"])
    forms = set()
    for secret in secrets:
        forms.update((secret, quote(secret, safe=""), quote_plus(secret)))
    return forms


def leaks(text, forms):
    return sorted(form for form in forms if form in text)


def npumon(cli, *args, env):
    """`npumon ARGS` through the CLI's main() in this process (no interpreter start); its exit code and output."""
    proc = cli(*args, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def file_bytes(pattern):
    text = b""
    for path in sorted(glob.glob(pattern)):  # the SQLite file and its -wal / -journal companions
        with open(path, "rb") as handle:
            text += handle.read()
    return text


def test_echoed_secrets_stay_out_of_the_log_the_outbox_the_history_and_both_commands(tmp_path, cli):
    with RecordingServer(echo) as server:
        env = {name: value for name, value in SECRET_ENV.items() if value is not None}
        env["NPUMON_TEST_ECHO_DINGTALK_URL"] = server.url("/robot/send?access_token=" + DINGTALK_TOKEN)
        config = tmp_path / "npumon.yaml"
        config.write_text(config_text(tmp_path, server))
        daemon = DaemonProcess(["--simulate=overheat", "--listen", "127.0.0.1:0", "--config", str(config)], env=env)
        try:
            for name in RECEIVERS:
                daemon.wait_for_line(r"(cannot deliver .* to '{0}'|receiver '{0}' .* refused)".format(name),
                                     timeout=30)
            daemon.stop()
        finally:
            daemon.close()
        test_code, test_output = npumon(cli, "notify", "test", "--config", str(config), env=env)
        forms = forbidden_forms(server)
    assert daemon.proc.returncode == 0, daemon.lines
    assert len(server.requests) >= len(RECEIVERS)

    log = "\n".join(daemon.lines)
    assert leaks(log, forms) == []
    assert "<secret>" in log  # the echo was there, masked

    state = str(tmp_path / "state")
    for name in ("outbox.sqlite", "events.sqlite"):
        stored = file_bytes(os.path.join(state, name + "*"))
        assert stored, name
        assert leaks(stored.decode("utf-8", "replace"), forms) == [], name
    # The stored answers are capped, in bytes, wherever they are kept.
    with sqlite3.connect(os.path.join(state, "outbox.sqlite")) as db:
        errors = [row[0] for row in db.execute("SELECT last_error FROM notifications WHERE last_error IS NOT NULL")]
    assert errors and all(len(error.encode("utf-8")) <= ERROR_TEXT_LIMIT_BYTES for error in errors), errors
    assert any(error.endswith("[...]") for error in errors)

    code, events_text = npumon(cli, "events", "--config", str(config), "--kind", "notification_failed", env=env)
    assert code == 0 and events_text.count("notification_failed") >= len(RECEIVERS), events_text
    code, events_json = npumon(cli, "events", "--config", str(config), "--json", env=env)
    assert code == 0
    assert leaks(events_text + events_json, forms) == []
    for event in json.loads(events_json):
        if event["kind"] == "notification_failed":
            stored = (event["details"] or {}).get("error") or (event["details"] or {}).get("answer") or ""
            assert len(stored.encode("utf-8")) <= ERROR_TEXT_LIMIT_BYTES, event

    assert test_code == 1
    lines = test_output.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == list(RECEIVERS), test_output
    assert leaks(test_output, forbidden_forms(server)) == []
    for line in lines:
        answer = line.split(" - ", 1)[1]
        assert answer.startswith("HTTP ") and "<secret>" in answer
        assert len(answer.encode("utf-8")) <= ERROR_TEXT_LIMIT_BYTES, line
