"""The configuration's schema: frozen dataclasses whose field names are the YAML keys.

Their type hints drive the conversion in load.py, so adding a setting is adding one field. `Config` is the
core settings below plus one section per source or service that declares one (sources/registry.py,
services/sections.py): a new source's settings appear in the config without an edit here.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..services.sections import SECTIONS as SERVICE_SECTIONS
from ..sources.registry import SOURCES

LOG_LEVELS = ("debug", "info", "warning", "error")


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
    check_max_concurrent: int = 4
    root: str = "/"  # prefix for every host path (/proc, /sys, /dev, the Ascend directory); tests use fake trees
    ascend_dir: str = "/usr/local/Ascend"
    state_dir: str = "/var/lib/npumon"  # event history and the notification outbox live here
    max_age_seconds: float = 120.0  # values older than this are dropped rather than served stale
    log_level: str = "info"
    poll: PollConfig = field(default_factory=PollConfig)
    thresholds: Dict[str, float] = field(default_factory=dict)  # rule parameters, see `npumon rules --params`
    rule_files: List[str] = field(default_factory=list)
    exporter: ExporterConfig = field(default_factory=ExporterConfig)
    source: str = "<defaults>"  # where this config came from, for messages


# Every section: (YAML key, dataclass, problems). serving, probe: sources; events, notify, control: services.
SECTIONS = tuple(spec.section for spec in SOURCES if spec.section is not None) + SERVICE_SECTIONS

Config = dataclasses.make_dataclass(
    "Config", [(section.key, section.schema, field(default_factory=section.schema)) for section in SECTIONS],
    bases=(CoreConfig,), frozen=True, namespace={"__doc__": "The whole config: CoreConfig plus every section."})
Config.__module__ = __name__
