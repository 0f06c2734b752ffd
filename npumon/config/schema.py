"""The configuration's schema: frozen dataclasses whose field names are the YAML keys.

Their type hints drive the conversion in load.py, so adding a setting is adding one field. The whole config
is the core settings below plus one Section per source or service that declares one; it is put together
above them all (npumon/settings.py), so a new source's settings appear in the config without an edit here.
"""

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

LOG_LEVELS = ("debug", "info", "warning", "error")
DEFAULT_STATE_DIR = "/var/lib/npumon"
STATE_DIR_ENV = "NPUMON_STATE_DIR"


def default_state_dir() -> str:
    """/var/lib/npumon, or NPUMON_STATE_DIR: the test suite points it at a temporary directory per test (and so
    every npumon process a test starts) so that running the tests on a host never touches the daemon's state."""
    return os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR


@dataclass(frozen=True)
class PollConfig:
    """Seconds between polls of each tier. The main table is one call for all chips; the `-t` queries are
    one call per card (health: per chip) and change slowly, so they run less often. 0 disables a tier."""

    table_seconds: float = 15.0
    usages_seconds: float = 30.0
    power_seconds: float = 60.0
    health_seconds: float = 60.0
    ecc_seconds: float = 300.0
    board_seconds: float = 3600.0
    # `info -m` + `-t board -i N -c C` per chip: logical and physical ids, die id, model name (read at start)
    identity_seconds: float = 3600.0
    # Read only for npu-exporter's families: unset = off, or these intervals with exporter.npu_exporter_compat
    common_seconds: Optional[float] = None  # AI Core frequency (120 with compat)
    memory_seconds: Optional[float] = None  # HBM temperature (300 with compat)
    volt_seconds: Optional[float] = None  # voltage, one call per chip (600 with compat)
    # the interconnect links, one call per chip each (products without them refuse the query once), sharing
    # one npu-smi slot: on an A3 over npu-smi these intervals keep it about half busy
    hccs_seconds: float = 120.0  # HCCS link state and counters
    hccs_bw_seconds: float = 300.0  # HCCS bandwidth over 200 ms (the call holds its slot that long)
    sio_seconds: float = 300.0  # A3 die-to-die CRC errors
    ub_seconds: float = 60.0  # the 950's UB port states and counters (DCMI only)
    ub_bw_seconds: float = 120.0  # the 950's UB port bandwidth over 100 ms per port (DCMI only)
    host_seconds: float = 15.0


@dataclass(frozen=True)
class ExporterConfig:
    listen: str = "0.0.0.0:9842"
    npu_exporter_compat: bool = False
    # A second listener serving only npu-exporter's families at /metrics, e.g. "0.0.0.0:8082" (npu-exporter's
    # default port), so scrape configs and DaemonSets made for npu-exporter work unchanged
    npu_exporter_listen: Optional[str] = None
    # Value of a `node` label on npu-exporter's families (Kubernetes node name); "$VAR" reads environment VAR
    node_label: Optional[str] = None
    tls_cert_file: Optional[str] = None
    tls_key_file: Optional[str] = None
    # the HTTP server's limits (outputs/httpserver.py): workers started once, open connections (more are
    # answered 503 at once), and the deadline of a whole request (TLS handshake, head, body and answer)
    http_workers: int = 10
    max_connections: int = 512
    request_timeout_seconds: float = 10.0
    # exporter-toolkit web config (node_exporter's --web.config.file): TLS, client certificates, basic auth
    web_config_file: Optional[str] = None
    # npumon_chip_process_memory_bytes: the largest N processes of each chip get a series (pid and name labels
    # come and go with workloads); the rest are summed in npumon_chip_process_memory_other_bytes. 0: none.
    process_series_per_chip: int = 10


@dataclass(frozen=True)
class CoreConfig:
    npu_smi: str = "npu-smi"
    npu_smi_timeout_seconds: float = 10.0
    npu_smi_max_concurrent: int = 2  # the daemon's npu-smi calls at a time (the main table has one more slot)
    npu_smi_max_output_bytes: int = 4 * 1024 * 1024  # one call's stdout + stderr; past it the call is killed
    # `npumon check`'s: one pass may ask more at once to fit NRPE's 10 s (nvitop-npu runs 8 per-card queries at once)
    check_max_concurrent: int = 8
    root: str = "/"  # prefix for every host path (/proc, /sys, /dev, the Ascend directory); tests use fake trees
    ascend_dir: str = "/usr/local/Ascend"
    # event history, the notification outbox, caches and cursors; NPUMON_STATE_DIR changes the default
    state_dir: str = field(default_factory=default_state_dir)
    max_age_seconds: float = 120.0  # values older than this are dropped rather than served stale
    log_level: str = "info"
    poll: PollConfig = field(default_factory=PollConfig)
    thresholds: Dict[str, float] = field(default_factory=dict)  # rule parameters, see `npumon rules --params`
    rule_files: List[str] = field(default_factory=list)
    exporter: ExporterConfig = field(default_factory=ExporterConfig)
    source: str = "<defaults>"  # where this config came from, for messages


@dataclass(frozen=True)
class Section:
    """A config section a source or service owns: its YAML key, its dataclass (the schema), and the checks that
    types cannot express: problems(section, config) -> [(dotted key, problem)]."""

    key: str
    schema: type
    problems: Callable[[Any, Any], List[Tuple[str, str]]] = lambda section, config: []


def config_class(sections: Sequence[Section]) -> type:
    """The whole config's dataclass: CoreConfig plus one field per section, named by its key."""
    cls = dataclasses.make_dataclass(
        "Config", [(section.key, section.schema, field(default_factory=section.schema)) for section in sections],
        bases=(CoreConfig,), frozen=True, namespace={"__doc__": "The whole config: CoreConfig plus every section."})
    return cls
