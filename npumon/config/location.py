"""Which config file a command reads: --config, else the file the systemd unit reads, when it is there.

Every command reads /etc/npumon/npumon.yaml by default (the unit's `run --config /etc/npumon/npumon.yaml`),
so `npumon check` or `npumon notify test` on a host judges and sends as its daemon does. NPUMON_CONFIG
names another default file: tests point it at a temporary path so that they never read the host's /etc.
"""

import os
from typing import Mapping, Optional

from .schema import CoreConfig

DEFAULT_CONFIG_PATH = "/etc/npumon/npumon.yaml"
CONFIG_ENV = "NPUMON_CONFIG"
_NO_FILE_PREFIX = "built-in defaults"


def default_config_path(environ: Mapping[str, str] = os.environ) -> str:
    """The file read when no --config is given."""
    return environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH


def config_path(given: Optional[str], environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The file to read: `given` (--config), else the default file if it exists (even unreadable: that is
    an error to report, not a reason to run on other settings), else None."""
    if given is not None:
        return given
    default = default_config_path(environ)
    return default if os.path.lexists(default) else None


def defaults_source(environ: Mapping[str, str] = os.environ) -> str:
    """The `source` of a config that is the built-in defaults: it says which file was looked for."""
    return "{} ({})".format(_NO_FILE_PREFIX, no_file_reason(environ))


def no_file_reason(environ: Mapping[str, str] = os.environ) -> str:
    return "no config file: {} not present".format(default_config_path(environ))


def from_file(config: CoreConfig) -> bool:
    """Whether the config was read from a file (rather than being the built-in defaults)."""
    return not config.source.startswith(_NO_FILE_PREFIX) and config.source != CoreConfig().source


def in_source(config: CoreConfig) -> str:
    """' in FILE', or '; no config file: FILE not present', to end a phrase naming a setting."""
    return " in " + config.source if from_file(config) else "; " + no_file_reason()


def file_to_edit(config: CoreConfig) -> str:
    """The file in which to change a setting: the one read, or the default one, to be created."""
    return config.source if from_file(config) else "{} (not present yet)".format(default_config_path())
