"""The notify: config section: validation messages name file, line and key; secrets come inline, from a
file or from the environment and never show in repr, errors or redacted texts."""

import os

import pytest

from npumon.config.errors import ConfigError
from npumon.settings import load_config, parse_config
from npumon.services.notify.config import ReceiverConfig
from npumon.services.notify.receiver import effective_timing
from npumon.services.notify.flavour import Timing
from npumon.services.notify.redact import Redactor
from npumon.services.notify.secrets import SecretError, resolve_secrets, safe_endpoint

GOOD = """\
notify:
  labels: {cluster: c1}
  external_url: https://npu-host-01:9842/status
  receivers:
    - name: oncall
      type: pagerduty
      routing_key_env: NPUMON_TEST_PD_KEY
    - name: chat
      type: dingtalk
      url: https://oapi.dingtalk.com/robot/send?access_token=abcdef0123456789
      secret_file: /etc/npumon/dingtalk.secret
      max_per_minute: 10
  routes:
    - receivers: [oncall]
      severity: [critical]
    - receivers: [chat]
      rule: ["temperature-*", health-alarm]
      labels: {team: infra}
"""


def test_good_config_parses_and_hides_inline_secrets_from_repr():
    config = parse_config(GOOD, "npumon.yaml")
    notify = config.notify
    assert [r.name for r in notify.receivers] == ["oncall", "chat"]
    assert notify.routes[1].rule == ["temperature-*", "health-alarm"]
    assert notify.labels == {"cluster": "c1"}
    assert "abcdef0123456789" not in repr(config)


def test_defaults_without_a_notify_section():
    notify = parse_config("poll: {table_seconds: 5}\n", "npumon.yaml").notify
    assert notify.receivers == [] and notify.routes == []
    assert notify.outbox_max_notifications == 10000 and notify.restart_grace_seconds == 60.0


@pytest.mark.parametrize("text, message", [
    ("notify:\n  receivers:\n    - name: a\n      type: telegram\n      url: http://x\n",
     "npumon.yaml:4: notify.receivers[0].type: must be one of webhook, alertmanager, dingtalk, feishu, wecom, "
     "slack, pagerduty (got 'telegram')"),
    ("notify:\n  receivers:\n    - name: a\n      type: webhook\n",
     "npumon.yaml:4: notify.receivers[0].type: a webhook receiver needs one of url, url_file, url_env"),
    ("notify:\n  receivers:\n    - name: a\n      type: webhook\n      url: http://x\n      url_env: X\n",
     "npumon.yaml:6: notify.receivers[0].url_env: give only one of url, url_file, url_env"),
    ("notify:\n  receivers:\n    - name: a\n      type: slack\n      url: http://x\n      secret: s\n",
     "npumon.yaml:6: notify.receivers[0].secret: a slack receiver takes no secret"),
    ("notify:\n  receivers:\n    - name: a\n      type: webhook\n      url: ftp://x\n",
     "npumon.yaml:5: notify.receivers[0].url: must be an http:// or https:// URL"),
    ("notify:\n  receivers:\n    - {name: a, type: webhook, url: 'http://x'}\n    - {name: a, type: slack, url: 'http://y'}\n",
     "npumon.yaml:4: notify.receivers[1].name: receiver 'a' is defined twice"),
    ("notify:\n  receivers:\n    - {name: 'a b', type: webhook, url: 'http://x'}\n",
     "npumon.yaml:3: notify.receivers[0].name: use letters, digits, '_', '.' and '-' (got 'a b')"),
    ("notify:\n  receivers:\n    - {name: a, type: webhook, url: 'http://x'}\n  routes:\n    - receivers: [b]\n",
     "npumon.yaml:5: notify.routes[0].receivers: unknown receiver 'b' (known: a)"),
    ("notify:\n  receivers:\n    - {name: a, type: webhook, url: 'http://x'}\n  routes:\n"
     "    - {receivers: [a], severity: [fatal]}\n",
     "npumon.yaml:5: notify.routes[0].severity: unknown severity 'fatal' (known: info, warning, critical)"),
    ("notify:\n  receivers:\n    - {name: a, type: alertmanager, url: 'http://x', repeat_seconds: 0}\n",
     "npumon.yaml:3: notify.receivers[0].repeat_seconds: must be more than 0: Alertmanager forgets firing alerts "
     "that are not re-sent"),
    ("notify:\n  receivers:\n    - {name: a, type: webhook, url: 'http://x', timeout_seconds: 0}\n",
     "npumon.yaml:3: notify.receivers[0].timeout_seconds: must be greater than 0"),
    ("notify:\n  receivers:\n    - {name: a, type: webhook, url: 'http://x', max_per_minute: -1}\n",
     "npumon.yaml:3: notify.receivers[0].max_per_minute: must be 0 or more"),
    ("notify:\n  outbox_max_notifications: 0\n",
     "npumon.yaml:2: notify.outbox_max_notifications: must be at least 1"),
    ("notify:\n  receivers:\n    - name: a\n      type: webhook\n      url: http://x\n      colour: red\n",
     "npumon.yaml:6: notify.receivers[0].colour: unknown key"),
])
def test_mistakes_name_file_line_and_key(text, message):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "npumon.yaml")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_a_bad_inline_url_is_reported_without_its_value():
    text = "notify:\n  receivers:\n    - {name: a, type: webhook, url: 'htp://host/hook?token=s3cr3t-value'}\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "npumon.yaml")
    assert "s3cr3t-value" not in str(caught.value)


# ------------------------------------------------------------------------------------------ secrets

def test_secrets_inline_from_file_and_from_environment(tmp_path, monkeypatch):
    secret_file = tmp_path / "dingtalk.secret"
    secret_file.write_text("SECfromfile\n")
    monkeypatch.setenv("NPUMON_TEST_PD_KEY", " key-from-env ")
    config = ReceiverConfig(name="chat", type="dingtalk", url="https://x/send?access_token=t",
                            secret_file=str(secret_file))
    assert resolve_secrets(config, 0, "npumon.yaml") == {"url": "https://x/send?access_token=t",
                                                         "secret": "SECfromfile"}
    pd = ReceiverConfig(name="pd", type="pagerduty", routing_key_env="NPUMON_TEST_PD_KEY")
    assert resolve_secrets(pd, 1, "npumon.yaml") == {"routing_key": "key-from-env"}


def test_secret_errors_name_the_line_of_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv("NPUMON_TEST_PD_KEY", raising=False)
    path = tmp_path / "npumon.yaml"
    path.write_text(GOOD)
    config = load_config(str(path))
    with pytest.raises(SecretError) as caught:
        resolve_secrets(config.notify.receivers[0], 0, str(path))
    assert str(caught.value) == ("{}:7: notify.receivers[0].routing_key_env: receiver 'oncall': environment "
                                 "variable NPUMON_TEST_PD_KEY is not set".format(path))
    with pytest.raises(SecretError) as caught:
        resolve_secrets(config.notify.receivers[1], 1, str(path))
    assert str(caught.value) == ("{}:11: notify.receivers[1].secret_file: receiver 'chat': cannot read "
                                 "/etc/npumon/dingtalk.secret: No such file or directory".format(path))


def test_secret_file_with_a_bad_url_is_refused_without_showing_it(tmp_path):
    url_file = tmp_path / "url"
    url_file.write_text("hooks.slack.com/services/T/B/s3cr3t-token\n")
    config = ReceiverConfig(name="s", type="slack", url_file=str(url_file))
    with pytest.raises(SecretError) as caught:
        resolve_secrets(config, 0, "<test>")
    assert "must start with http" in str(caught.value) and "s3cr3t" not in str(caught.value)


def test_empty_secret_file_is_an_error(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SecretError, match="is empty"):
        resolve_secrets(ReceiverConfig(name="s", type="slack", url_file=str(empty)), 0, "<test>")


def test_redactor_masks_urls_their_tokens_and_secrets():
    redact = Redactor(["https://oapi.dingtalk.com/robot/send?access_token=abcdef0123456789", "SECsigning99",
                       "https://user:hunter2pass@hooks.example.com/services/T0001/B0002/XyZsecretPart"])
    text = ("POST https://oapi.dingtalk.com/robot/send?access_token=abcdef0123456789 failed; token "
            "abcdef0123456789; sign with SECsigning99; /services/T0001/B0002/XyZsecretPart; hunter2pass")
    masked = redact(text)
    for secret in ("abcdef0123456789", "SECsigning99", "XyZsecretPart", "hunter2pass"):
        assert secret not in masked
    assert masked.startswith("POST <secret> failed")


def test_safe_endpoint_keeps_only_scheme_host_and_port():
    assert safe_endpoint("https://oapi.dingtalk.com/robot/send?access_token=x") == "https://oapi.dingtalk.com"
    assert safe_endpoint("http://user:pw@[::1]:9093/api") == "http://[::1]:9093"


def test_unset_timing_knobs_take_the_flavour_defaults():
    defaults = Timing(group_wait_seconds=0, group_interval_seconds=30, repeat_seconds=3600, max_per_minute=20)
    config = ReceiverConfig(name="c", type="dingtalk", url="https://x", group_interval_seconds=5, max_per_minute=0)
    assert effective_timing(config, defaults) == Timing(0, 5, 3600, 0)


def test_environment_is_not_consulted_at_parse_time(monkeypatch):
    """`npumon check` must work without the notifier's secrets."""
    monkeypatch.delenv("NPUMON_TEST_PD_KEY", raising=False)
    assert parse_config(GOOD, "npumon.yaml").notify.receivers[0].routing_key_env == "NPUMON_TEST_PD_KEY"
    assert "NPUMON_TEST_PD_KEY" not in os.environ
