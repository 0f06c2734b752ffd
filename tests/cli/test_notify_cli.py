"""`npumon notify test` as a user runs it: real receivers on 127.0.0.1; one real subprocess, the rest
through npumon.cli.main.main in-process (the same code, without a second of interpreter start-up each)."""

import json
import subprocess
import sys


from recording_server import RecordingServer, json_reply

TOKEN = "cli-t0ken-0123456789"


def npumon(*args):
    proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def write_config(tmp_path, text):
    path = tmp_path / "npumon.yaml"
    path.write_text(text)
    return str(path)


def test_sends_a_test_alert_to_every_receiver_and_prints_the_answers(tmp_path):
    with RecordingServer() as hook, RecordingServer(json_reply({"errcode": 310000, "errmsg": "keywords not in content"})) as robot:
        config = write_config(tmp_path, """\
notify:
  receivers:
    - {{name: hook, type: webhook, url: '{hook}'}}
    - {{name: robot, type: dingtalk, url: '{robot}', secret: SECabcdef123456}}
""".format(hook=hook.url("/hook?token=" + TOKEN), robot=robot.url("/robot/send?access_token=" + TOKEN)))
        code, out, err = npumon("notify", "test", "--config", config)
        (request,) = hook.requests
        assert len(robot.requests) == 1
    assert code == 1 and err == ""
    assert out.splitlines() == [
        "hook (webhook, {}): delivered - HTTP 200: ok".format(hook.url("")),
        'robot (dingtalk, {}): failed - HTTP 200: {{"errcode": 310000, "errmsg": "keywords not in content"}}'.format(
            robot.url("")),
    ]
    (sent,) = request.json()["alerts"]
    assert sent["labels"]["alertname"] == "npumon-test" and sent["status"] == "firing"
    assert TOKEN not in out + err and "SECabcdef123456" not in out + err


def test_one_receiver_and_resolve(tmp_path, run):
    with RecordingServer() as hook, RecordingServer() as other:
        config = write_config(tmp_path, "notify:\n  receivers:\n    - {{name: hook, type: webhook, url: '{}'}}\n"
                              "    - {{name: other, type: slack, url: '{}'}}\n".format(hook.url("/h"), other.url("/s")))
        code, out, _ = run("notify", "test", "-c", config, "--receiver", "hook", "--resolve")
        assert other.requests == []
        (request,) = hook.requests
    assert code == 0 and out.startswith("hook (webhook, http://127.0.0.1:")
    assert request.json()["alerts"][0]["status"] == "resolved"


def test_mistakes_are_one_line_and_exit_2(tmp_path, run):
    config = write_config(tmp_path, "notify:\n  receivers:\n    - name: pd\n      type: pagerduty\n"
                          "      routing_key_env: NPUMON_TEST_UNSET_KEY\n")
    code, out, err = run("notify", "test", "-c", config, "--receiver", "nope")
    assert (code, out, err) == (2, "", "npumon: --receiver: unknown receiver 'nope' (known: pd)\n")
    code, out, err = run("notify", "test", "-c", config)
    assert (code, out) == (2, "")
    assert err == ("npumon: {}:5: notify.receivers[0].routing_key_env: receiver 'pd': environment variable "
                   "NPUMON_TEST_UNSET_KEY is not set\n".format(config))
    empty = write_config(tmp_path, "log_level: info\n")
    assert run("notify", "test", "-c", empty)[0::2] == (
        2, "npumon: no receivers configured (notify.receivers in {})\n".format(empty))
    bad = write_config(tmp_path, "notify:\n  receivers: nope\n")
    code, _, err = run("notify", "test", "-c", bad)
    assert code == 2 and err.count("\n") == 1 and "notify.receivers: expected a list" in err
    code, _, err = run("notify")
    assert code == 2 and "test" in err


def test_an_unreachable_receiver_is_reported_not_a_traceback(tmp_path, run):
    with RecordingServer() as gone:
        url = gone.url("/hook?token=" + TOKEN)
    config = write_config(tmp_path, "notify:\n  receivers:\n    - {{name: hook, type: webhook, url: '{}'}}\n"
                          .format(url))
    code, out, err = run("notify", "test", "-c", config)
    assert code == 1 and err == ""
    assert out == "hook (webhook, {}): failed (temporary: the daemon would retry it) - cannot connect: Connection " \
                  "refused\n".format(url.split("/hook")[0])
    assert json.dumps(out).find(TOKEN) == -1
