"""Power profiles: a name (performance, quiet, ...) mapped per product to an npu-smi knob that exists.

What exists (FORMATS.md section 6, acl-probe-fan-power.md 5.2): `npu-smi set -t nve-level -i N -c C -d V`,
the compute gear of Atlas 200I/500 A2 boards (310B; 8T module: 0 = 8T at 1.0 GHz, the factory setting,
1 = 4T at 1.0 GHz; 20T module: 0 = 20T at 1.6 GHz, 1 = 8T at 1.0 GHz, 2 = 16T at 1.6 GHz, 3 = 8T at
1.6 GHz), and `npu-smi set -t cpu-freq-up -i N -d 0|1` on 310P cards (npu-smi's help: 0 = 1.9 GHz,
1 = 1.0 GHz). Both take effect only after a reboot or card reset, as npu-smi's answer says. npu-smi has no
power-mode or power-limit setting for the 910 family, so there a profile is refused, and so it is for
any product whose knob a profile does not set. Nothing here writes slog.conf: that file is the Ascend
logging configuration and has no power setting.

Planning is pure (chips + profile + config -> steps or a refusal); running the steps is one npu-smi call
each through a CommandRunner.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .drivers import DriverResult, Runner, npu_smi_set_outcome

FAMILY_310B = "310b"
FAMILY_310P = "310p"
KNOBS_BY_FAMILY = {FAMILY_310B: ("nve-level",), FAMILY_310P: ("cpu-freq-up",)}
BUILTIN_PROFILES: Dict[str, Dict[str, Dict[str, int]]] = {
    FAMILY_310B: {"performance": {"nve-level": 0}, "quiet": {"nve-level": 1}},
    FAMILY_310P: {"performance": {"cpu-freq-up": 0}, "quiet": {"cpu-freq-up": 1}},
}
PER_CHIP_KNOBS = frozenset(("nve-level",))  # set with -i and -c; the others per card with -i


@dataclass(frozen=True)
class PowerStep:
    knob: str
    value: int
    npu: int
    chip: Optional[int]  # None: a card-level setting

    def npu_smi_args(self) -> List[str]:
        args = ["set", "-t", self.knob, "-i", str(self.npu)]
        if self.chip is not None:
            args += ["-c", str(self.chip)]
        return args + ["-d", str(self.value)]

    def describe(self) -> str:
        return "npu-smi " + " ".join(self.npu_smi_args())


@dataclass(frozen=True)
class PowerPlan:
    profile: str
    steps: Tuple[PowerStep, ...] = ()
    refusal: Optional[str] = None  # why the profile cannot be applied here


def chip_family(chip_name: Optional[str]) -> Optional[str]:
    """"310B4" -> 310b, "310P3" -> 310p; None for chips without a power knob (910 family, 310, 950)."""
    name = (chip_name or "").upper().replace("ASCEND", "").strip()
    if name.startswith("310B"):
        return FAMILY_310B
    if name.startswith("310P"):
        return FAMILY_310P
    return None


def profiles_for(family: Optional[str], configured: Dict[str, Dict[str, int]]) -> Dict[str, Dict[str, int]]:
    """The profiles that can act on this family: built-in ones, then the config's (which win)."""
    knobs = KNOBS_BY_FAMILY.get(family or "", ())
    profiles = dict(BUILTIN_PROFILES.get(family or "", {}))
    for name, settings in configured.items():
        usable = {knob: value for knob, value in settings.items() if knob in knobs}
        if usable:
            profiles[name] = usable
        else:
            profiles.pop(name, None)  # a configured profile replaces the built-in one of its name
    return profiles


def plan_profile(profile: str, chips: Sequence[Tuple[int, int, Optional[str]]],
                 configured: Dict[str, Dict[str, int]]) -> PowerPlan:
    """The npu-smi settings that apply `profile` to `chips` ((npu, chip, name) from the main table)."""
    if not chips:
        return PowerPlan(profile, refusal="npu-smi info listed no chips")
    names = sorted({name or "unknown" for _, _, name in chips})
    families = {chip_family(name) for _, _, name in chips}
    if len(families) != 1:
        return PowerPlan(profile, refusal="this host mixes chips ({}); set power knobs with npu-smi by hand".format(
            ", ".join(names)))
    family = families.pop()
    if family is None:
        return PowerPlan(profile, refusal="{} has no power knob: npu-smi offers nve-level only on Atlas 200I/500 A2 "
                                          "boards (310B) and cpu-freq-up only on 310P cards, and has no power-mode "
                                          "or power-limit setting".format(", ".join(names)))
    profiles = profiles_for(family, configured)
    if profile not in profiles:
        wanted = configured.get(profile)
        if wanted:
            return PowerPlan(profile, refusal="profile {!r} sets {}, which {} does not have (it has {})".format(
                profile, ", ".join(sorted(wanted)), ", ".join(names), ", ".join(KNOBS_BY_FAMILY[family])))
        return PowerPlan(profile, refusal="no profile {!r} for {} (defined: {}; add one under "
                                          "control.power.profiles)".format(profile, ", ".join(names),
                                                                           ", ".join(sorted(profiles)) or "none"))
    steps: List[PowerStep] = []
    for knob, value in sorted(profiles[profile].items()):
        if knob in PER_CHIP_KNOBS:
            steps += [PowerStep(knob, value, npu, chip) for npu, chip, _ in sorted(chips)]
        else:
            steps += [PowerStep(knob, value, npu, None) for npu in sorted({npu for npu, _, _ in chips})]
    return PowerPlan(profile, steps=tuple(steps))


def apply_step(runner: Runner, step: PowerStep) -> DriverResult:
    """One npu-smi set call; its message says when the setting takes effect (after a reboot/reset)."""
    return npu_smi_set_outcome(runner.run(step.npu_smi_args()))
