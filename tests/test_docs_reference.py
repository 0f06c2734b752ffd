"""The docs stay true to the code: the generated references (every config key, metric family and rule fact)
are up to date, and every relative link in README.md and docs/ points at a file and heading that exist."""

import glob
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_generated_references_are_up_to_date():
    checked = subprocess.run([sys.executable, os.path.join(REPO, "docs", "reference.py"), "--check"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    assert checked.returncode == 0, checked.stdout


def _anchors(path):
    found, fence = set(), False
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("```"):
                fence = not fence
            elif not fence and re.match(r"#{1,6} ", line):
                title = line.lstrip("#").strip().lower()
                found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_every_relative_link_points_at_a_file_and_heading_that_exist():
    broken = []
    for page in [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
        with open(page, encoding="utf-8") as handle:
            text = re.sub(r"```.*?```", "", handle.read(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(resolved):
                broken.append("{}: {} (no such file)".format(os.path.relpath(page, REPO), target))
            elif anchor and resolved.endswith(".md") and anchor not in _anchors(resolved):
                broken.append("{}: {} (no such heading)".format(os.path.relpath(page, REPO), target))
    assert not broken, "\n".join(broken)
