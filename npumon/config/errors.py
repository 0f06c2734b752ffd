"""The one error a bad config raises, and where in the file a key is."""

from typing import List, Optional, Union

import yaml


class ConfigError(ValueError):
    """A one-line message: `file:line: key: problem`."""


def line_of(root: Optional[yaml.Node], keys: List[Union[str, int]]) -> int:
    """The line of `keys` (mapping keys and list indices) in the document: the key's own line where it is
    there, else where the deepest mapping or list along the way that exists begins."""
    node, line = root, 1
    for key in keys:
        if node is None:
            break
        if isinstance(key, int) and isinstance(node, yaml.SequenceNode) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        elif isinstance(key, str) and isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key]
            if not match:
                line = node.start_mark.line + 1
                break
            line = match[0][0].start_mark.line + 1
            node = match[0][1]
        else:
            break
    return line
