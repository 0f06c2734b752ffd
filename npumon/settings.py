"""The whole config: the core settings (config/) plus the section of every source and service that declares
one, each checked by its owner -- the exporter its listeners and limits (outputs/web.py), the rule loader its
thresholds (rules/loader.py), each source and service its section (Section.problems).

It sits above the sources, rules, outputs and services it puts together; config/ below them knows none of
them. A new source's section appears here through the source list (sources/registry.py) without an edit.
"""

import dataclasses
from typing import List, Optional, Tuple

from .childenv import withhold
from .config.load import document_problems, parse_document, read_text
from .config.location import config_path, defaults_source
from .config.schema import config_class
from .outputs.web import exporter_config_problems
from .rules.loader import threshold_problems
from .services.notify.config import secret_variables
from .services.sections import SECTIONS as SERVICE_SECTIONS
from .sources.registry import SOURCES

# Every section: (YAML key, dataclass, problems). serving, probe, ...: sources; events, notify, control: services.
SECTIONS = tuple(spec.section for spec in SOURCES if spec.section is not None) + SERVICE_SECTIONS

Config = config_class(SECTIONS)
Config.__module__ = __name__


def _section_problems(config: Config) -> List[Tuple[str, str]]:
    """Each section's own checks, keys in full: "serving.url", "notify.receivers[2].url"."""
    problems: List[Tuple[str, str]] = []
    for section in SECTIONS:
        problems.extend(section.problems(getattr(config, section.key), config))
    return problems


CHECKS = (exporter_config_problems, threshold_problems, _section_problems)


def parse_config(text: str, path: str = "<config>") -> Config:
    """A config document, validated; a ConfigError names the first problem's file, line and key."""
    return parse_document(text, path, Config, CHECKS)


def load_config(path: Optional[str]) -> Config:
    """Read and validate a config file; None gives the defaults."""
    if path is None:
        return Config()
    config = parse_config(read_text(path, "config"), path)
    withhold(secret_variables(config.notify))  # no child npumon starts sees a variable holding a secret
    return config


def config_problems(path: str) -> Tuple[Optional[Config], List[str]]:
    """Every problem of a config file, one line each, in file order (`npumon config check`)."""
    return document_problems(path, Config, CHECKS)


def load_command_config(given: Optional[str]) -> Config:
    """The config a command runs with: --config FILE, the default file, or the built-in defaults with a
    `source` that says which file was looked for (for messages: never a bare '<defaults>')."""
    path = config_path(given)
    if path is not None:
        return load_config(path)
    return dataclasses.replace(Config(), source=defaults_source())
