"""libyaml where PyYAML has it: the same nodes and values as PyYAML's own parser for every YAML file npumon
reads at start, and PyYAML's own error messages for a document either refuses."""

import glob
import os

import pytest
import yaml

from npumon.config import yamlparse
from paths import REPO

SHIPPED = sorted(glob.glob(os.path.join(REPO, "npumon", "**", "*.yaml"), recursive=True))
needs_libyaml = pytest.mark.skipif(yamlparse.FAST_LOADER is yaml.SafeLoader, reason="PyYAML without libyaml here")


def located(node):
    """A node tree with what npumon reads of it: tags, values and the lines errors name."""
    if isinstance(node, yaml.ScalarNode):
        return node.tag, node.value, node.start_mark.line, node.start_mark.column
    if isinstance(node, yaml.SequenceNode):
        return node.tag, node.start_mark.line, [located(item) for item in node.value]
    return node.tag, node.start_mark.line, [(located(key), located(value)) for key, value in node.value]


def test_the_shipped_files_are_found():
    names = {os.path.relpath(path, os.path.join(REPO, "npumon")) for path in SHIPPED}
    assert {"rules/builtin.yaml", "faults/patterns.yaml", "faults/actions.yaml", "sim/scenarios/healthy.yaml"} <= names


@needs_libyaml
@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: os.path.relpath(path, REPO))
def test_libyaml_reads_every_shipped_file_as_pyyaml_does(path):
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    assert yamlparse.FAST_LOADER is not yaml.SafeLoader
    assert located(yamlparse.compose(text)) == located(yaml.compose(text, Loader=yaml.SafeLoader))
    assert yamlparse.safe_load(text) == yaml.safe_load(text)


@pytest.mark.parametrize("text", ["a: b: c\n", "key: [1, 2\n", "- a\nb: c\n", "a: 'open\n", "x: *nope\n"])
def test_a_refused_document_gets_pyyamls_own_message(text):
    with pytest.raises(yaml.YAMLError) as expected:
        yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError) as got:
        yamlparse.safe_load(text)
    assert str(got.value) == str(expected.value)
    assert type(got.value) is type(expected.value)


def test_an_empty_document_is_none():
    assert yamlparse.compose("") is None and yamlparse.safe_load("# nothing\n") is None
