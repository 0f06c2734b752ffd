"""Which config file a command reads: --config, else the file the systemd unit reads, when it is there.

Every command reads /etc/npumon/npumon.yaml by default (the unit's `run --config /etc/npumon/npumon.yaml`),
so `npumon check` or `npumon notify test` on a host judges and sends as its daemon does. NPUMON_CONFIG
names another default file: tests point it at a temporary path so that they never read the host's /etc.
"""

import dataclasses
import os
from typing import Mapping, Optional

from .load import load_config
from .schema import Config

DEFAULT_CONFIG_PATH = "/etc/npumon/npumon.yaml"
SIM_NPUMON_STATE = "npumon-state"  # npumon's own state dir inside a simulation's
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


def load_command_config(given: Optional[str]) -> Config:
    """The config a command runs with: --config FILE, the default file, or the built-in defaults with a
    `source` that says which file was looked for (for messages: never a bare '<defaults>')."""
    path = config_path(given)
    if path is not None:
        return load_config(path)
    return dataclasses.replace(Config(), source="{} ({})".format(_NO_FILE_PREFIX, no_file_reason()))


def no_file_reason(environ: Mapping[str, str] = os.environ) -> str:
    return "no config file: {} not present".format(default_config_path(environ))


def from_file(config: Config) -> bool:
    """Whether the config was read from a file (rather than being the built-in defaults)."""
    return not config.source.startswith(_NO_FILE_PREFIX) and config.source != Config().source


def in_source(config: Config) -> str:
    """' in FILE', or '; no config file: FILE not present', to end a phrase naming a setting."""
    return " in " + config.source if from_file(config) else "; " + no_file_reason()


def file_to_edit(config: Config) -> str:
    """The file in which to change a setting: the one read, or the default one, to be created."""
    return config.source if from_file(config) else "{} (not present yet)".format(default_config_path())


def for_simulation(config: Config, sim_state_dir: str) -> Config:
    """The config a command runs a simulated host with: its event history, outbox, caches and cursors live
    with the simulation, never in the real host's state_dir (/var/lib/npumon)."""
    state_dir = simulation_state_dir(config.state_dir, sim_state_dir)
    return config if state_dir == config.state_dir else dataclasses.replace(config, state_dir=state_dir)


def simulation_state_dir(state_dir: str, sim_state_dir: str) -> str:
    """npumon's state directory for a simulated host: the simulation's own, unless the config set state_dir
    to another place than the default (that is the user's choice of where)."""
    if os.path.normpath(state_dir) != os.path.normpath(Config().state_dir):
        return state_dir
    return os.path.join(os.path.abspath(sim_state_dir), SIM_NPUMON_STATE)
