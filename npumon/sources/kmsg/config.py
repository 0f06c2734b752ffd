"""The `faults:` section of the config file: the kernel log source.

    faults:
      kmsg: true                 # read /dev/kmsg (needs a drop-in under the shipped unit: see docs/faults.md)
      kmsg_path: /var/log/dmesg  # or read this file instead (dmesg, /var/log/messages, kmsg records)
      pattern_files: [/etc/npumon/faults.yaml]   # your own patterns, read before the built-in ones
      expected_chips: 8          # the expected-chip-count check; 0 (default) learns it
"""

from dataclasses import dataclass, field
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class FaultsConfig:
    kmsg: bool = False  # read /dev/kmsg; off by default: the shipped unit cannot read it (ProtectKernelLogs)
    kmsg_path: Optional[str] = None  # a file of kernel log lines instead of /dev/kmsg (turns the source on)
    pattern_files: List[str] = field(default_factory=list)
    interval_seconds: float = 10.0
    max_records_per_poll: int = 20000  # more are read on the next poll, a second later
    rate_limit_per_minute: int = 10  # lines kept per (device, fault class) a minute; more are counted as suppressed
    max_faults: int = 256  # distinct (device, fault class) kept at once
    hold_seconds: float = 3600.0  # a fault stays this long after its last line (sticky findings: until acked)
    # the window in which the lines of one fault class count towards `driver-fault-repeating` (a day, as the
    # Ascend Device Plugin's FaultFrequency rules count)
    repeat_window_seconds: float = 86400.0
    # the expected-chip-count check (sources/chipcount.py): NPU chips this host should have; 0 learns the count
    # from npu-smi's table and the NPUs on the PCI bus, and keeps it in the state directory
    expected_chips: int = 0
    # where /dev/kmsg cannot be opened for want of permission, read the kernel log from the journal instead
    journal_fallback: bool = True
    journalctl: str = "journalctl"
    chip_count: bool = True  # false turns the expected-chip-count check off

    @property
    def enabled(self) -> bool:
        return self.kmsg or bool(self.kmsg_path)


def faults_config_problems(section: FaultsConfig) -> List[Tuple[str, str]]:
    problems = []
    for key in ("interval_seconds", "hold_seconds", "repeat_window_seconds"):
        if getattr(section, key) <= 0:
            problems.append(("faults." + key, "must be more than 0"))
    for key in ("max_records_per_poll", "rate_limit_per_minute", "max_faults"):
        if getattr(section, key) < 1:
            problems.append(("faults." + key, "must be at least 1"))
    if section.expected_chips < 0:
        problems.append(("faults.expected_chips", "must be 0 (learn it) or more"))
    if section.enabled:
        from ...faults.patterns import PatternError, load_patterns
        try:
            load_patterns(section.pattern_files)
        except PatternError as exc:
            problems.append(("faults.pattern_files", str(exc)))
    return problems
