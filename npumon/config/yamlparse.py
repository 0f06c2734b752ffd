"""YAML parsed by libyaml where PyYAML has it, with PyYAML's own error messages.

PyYAML's pure-Python parser costs about 1 ms of CPU per KB: the built-in rules (46 KB) and the fault files
(14 KB) took about 60 ms of every start of npumon. libyaml, PyYAML's C binding (`yaml.CSafeLoader`), gives the
same nodes, with the same marks (so every error still names its line), in a fifth of that. Its error messages are
worded differently, so a document it refuses is parsed again by PyYAML's parser, whose error is the one raised:
messages do not depend on whether libyaml is installed.
"""

from typing import Any, Callable, Optional, TypeVar

import yaml

FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

T = TypeVar("T")


def parse(text: str, read: Callable[[Any], T]) -> T:
    """read(loader) with a safe loader over `text`: libyaml's, or after a YAMLError PyYAML's own (whose error
    propagates). `read` gets a loader with the SafeLoader methods (get_single_node, construct_object, ...)."""
    if FAST_LOADER is not yaml.SafeLoader:
        try:
            return _read_with(FAST_LOADER, text, read)
        except yaml.YAMLError:
            pass  # PyYAML's parser says what is wrong, in the words npumon's messages have always had
    return _read_with(yaml.SafeLoader, text, read)


def _read_with(loader_class: Any, text: str, read: Callable[[Any], T]) -> T:
    loader = loader_class(text)
    try:
        return read(loader)
    finally:
        loader.dispose()


def compose(text: str) -> Optional[yaml.Node]:
    """yaml.compose(text, Loader=yaml.SafeLoader), faster."""
    return parse(text, lambda loader: loader.get_single_node())


def safe_load(text: str) -> Any:
    """yaml.safe_load(text), faster."""
    return parse(text, lambda loader: loader.get_single_data())
