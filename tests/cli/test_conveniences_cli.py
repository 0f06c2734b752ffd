"""Conveniences: --json where a command prints data, scenario descriptions, the power profiles listed."""

import json
import re


from npumon.sim import list_products, list_scenarios
from recording_server import RecordingServer

TOKEN = "conv-t0ken-0123456789"


def test_notify_test_json(tmp_path, run):
    with RecordingServer() as hook:
        config = tmp_path / "npumon.yaml"
        config.write_text("notify:\n  receivers:\n    - {{name: hook, type: webhook, url: '{}'}}\n"
                          "    - {{name: gone, type: webhook, url: 'http://127.0.0.1:1/x'}}\n".format(
                              hook.url("/hook?token=" + TOKEN)))
        code, out, err = run("notify", "test", "--config", str(config), "--json")
    answers = json.loads(out)
    assert code == 1 and err == "" and TOKEN not in out
    assert [(a["receiver"], a["type"], a["delivered"]) for a in answers] == [("hook", "webhook", True),
                                                                            ("gone", "webhook", False)]
    assert answers[0]["outcome"] == "delivered" and answers[0]["detail"] == "HTTP 200: ok"
    assert answers[1]["outcome"].startswith("failed") and answers[0]["endpoint"] == hook.url("")


def test_scenarios_have_their_descriptions(run):
    code, out, _ = run("scenarios")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("Scenarios")
    (overheat,) = [line for line in lines if line.split()[0] == "overheat"]
    assert re.match(r"^  overheat +One chip at or above 85 C and rising, another in the 80-84 C warning band\. "
                    r"\[atlas-800i-a2\]$", overheat)
    assert len({line.index(line.split()[1]) for line in lines if line.startswith("  ")}) == 1  # one column
    code, out, _ = run("scenarios", "--json")
    document = json.loads(out)
    assert [entry["name"] for entry in document["scenarios"]] == list_scenarios()
    assert [entry["name"] for entry in document["products"]] == list_products()
    assert all(entry["description"] for entry in document["scenarios"] + document["products"])


def test_control_power_lists_its_profiles(run):
    code, out, _ = run("control", "power", "--list", "--simulate", "--sim-product", "atlas-200i-a2")
    assert code == 0 and out.splitlines() == ["power profiles for 310B4 (`npumon control power PROFILE`):",
                                              "  performance  nve-level 0", "  quiet        nve-level 1"]
    code, out, _ = run("control", "power", "--list", "--json", "--simulate", "--sim-product", "atlas-300i-duo")
    assert code == 0 and json.loads(out) == {"chips": ["310P3"], "profiles": {"performance": {"cpu-freq-up": 0},
                                                                             "quiet": {"cpu-freq-up": 1}}}
    code, out, _ = run("control", "power", "--list", "--simulate")
    assert (code, out) == (0, "910B3: no power knob on this product, so no profile\n")
    assert run("control", "power") == (2, "", "npumon: control power: give a PROFILE or --list (one of them)\n")
