"""The real hccn_tool captures (tests/fixtures/hccn/), each without its source header."""

import os

from paths import FIXTURES

HCCN_FIXTURES = os.path.join(FIXTURES, "hccn")


def capture(name: str) -> str:
    with open(os.path.join(HCCN_FIXTURES, name), encoding="utf-8") as handle:
        header, body = handle.read().split("# ---\n", 1)
    assert header.startswith("# source: "), name
    return body


def capture_names():
    return sorted(name for name in os.listdir(HCCN_FIXTURES) if name.endswith(".txt"))
