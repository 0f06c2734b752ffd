"""`npumon control status | fan --duty N | fan --auto | fan --safe | power PROFILE`.

Root tools that talk to the hardware directly, through the same checks as the daemon's governor: nothing
changes unless `control.enabled: true`, `control.dry_run: true` only says what would be done, a manual duty
below the floor is refused, and a power profile is refused on a product without its knob. Every action and
refusal is logged and recorded in the event history (<state_dir>/events.sqlite).

A running daemon with control enabled owns the fans: it reads them back every control.verify_seconds and
puts its own duty back. `fan` warns when such a daemon runs. `fan --safe` is meant for systemd's
ExecStopPost: it always applies the safe state when control is enabled (and does nothing when it is not).

Exit codes: 0 done (or dry run, or nothing to do), 1 refused or the hardware failed, 2 bad usage or config.
"""

import argparse
import json
import logging
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..sources.npusmi.table import parse_info
from ..sources.npusmi.common import NpuSmiParseError
from ..sources.runner import CommandRunner
from ..services.control.drivers import DriverResult, apply_safe_state, build_fan_driver, npu_smi_problem
from ..services.control.policy import FanPolicy, manual_duty_problem
from ..services.control.power import apply_step, chip_family, plan_profile, profiles_for
from ..services.control.statefile import running_daemon
from ..sources.target import NpuSmiMissing
from ..config.errors import ConfigError
from ..config.location import file_to_edit, in_source
from ..settings import load_command_config
from .common import USAGE_ERROR, UserError, open_target, setup_logging

log = logging.getLogger("npumon.services.control")

DONE = 0
REFUSED = 1


class _Refused(Exception):
    """The request is refused (or the hardware failed): one line, exit 1."""


# -- the commands ---------------------------------------------------------------------------------------------


def cmd_fan(args: argparse.Namespace) -> int:
    def act(session: "_Session") -> int:
        control = session.config.control
        if args.safe and not control.enabled:
            print("control is off (control.enabled is false{}): npumon has not touched the fans; nothing to "
                  "do".format(in_source(session.config)))
            return DONE
        knob = "fan_duty" if args.duty is not None or (args.safe and control.safe_state == "full") else "fan_mode"
        session.require_enabled(knob)
        if args.duty is not None:
            problem = manual_duty_problem(FanPolicy.from_config(control), args.duty)
            if problem is not None:
                raise session.refuse(knob, problem)
        driver = build_fan_driver(control, session.target.npu_smi_argv, session.target.env, session.target.root,
                                  session.config.npu_smi_timeout_seconds)
        if driver is None:
            if args.safe:
                print("control.fan.driver is none: no fans to put in the safe state")
                return DONE
            raise session.refuse(knob, "control.fan.driver is none: npumon drives no fans on this host")
        probe = driver.probe()
        if not probe.available:
            if args.safe:
                print("fan control unavailable ({}): nothing to put in the safe state".format(probe.detail))
                return DONE
            raise session.refuse(knob, "fan control unavailable: " + probe.detail)
        if args.duty is not None:
            what, run = "set the fan duty to {}%".format(args.duty), lambda: driver.set_duty(args.duty)
        elif args.auto:
            what, run = "hand the fans back to automatic control", driver.set_auto
        else:
            what = "put the fans in the safe state ({})".format(control.safe_state)
            run = lambda: apply_safe_state(driver, control.safe_state)  # noqa: E731
        return session.act(knob, what, run, {"duty": args.duty}, warn_daemon=not args.safe)

    return _run(args, act)


def cmd_power(args: argparse.Namespace) -> int:
    if args.list == (args.profile is not None):
        print("npumon: control power: give a PROFILE or --list (one of them)", file=sys.stderr)
        return USAGE_ERROR
    if args.json and not args.list:
        print("npumon: control power: --json goes with --list", file=sys.stderr)
        return USAGE_ERROR

    def act(session: "_Session") -> int:
        if args.list:
            return _list_profiles(session, args.json)
        session.require_enabled("power")
        chips, problem = session.main_table_chips()
        if problem is not None:
            raise session.refuse("power", problem, {"profile": args.profile})
        plan = plan_profile(args.profile, chips, session.config.control.power.profiles)
        if plan.refusal is not None:
            raise session.refuse("power", plan.refusal, {"profile": args.profile})
        status = DONE
        for step in plan.steps:
            where = "npu {}{}".format(step.npu, "" if step.chip is None else " chip {}".format(step.chip))
            details = {"profile": args.profile, "value": step.value, "npu": step.npu, "chip": step.chip,
                       "command": step.describe()}
            what = "set {} {} on {} (profile {})".format(step.knob, step.value, where, args.profile)
            if session.act(step.knob, what, lambda step=step: apply_step(session.runner, step), details) != DONE:
                status = REFUSED
        return status

    return _run(args, act)


def _list_profiles(session: "_Session", as_json: bool) -> int:
    """The power profiles for this host's chips (reads the main table only)."""
    power = _power_report(session)
    if as_json:
        print(json.dumps(power, indent=2, sort_keys=True))
        return DONE if "error" not in power else REFUSED
    if "error" in power:
        print("npumon: " + power["error"], file=sys.stderr)
        return REFUSED
    if not power["profiles"]:
        print("{}: no power knob on this product, so no profile".format(", ".join(power["chips"])))
        return DONE
    print("power profiles for {} (`npumon control power PROFILE`):".format(", ".join(power["chips"])))
    width = max(len(name) for name in power["profiles"])
    for name, knobs in sorted(power["profiles"].items()):
        print("  {}  {}".format(name.ljust(width), ", ".join("{} {}".format(k, v) for k, v in sorted(knobs.items()))))
    return DONE


def cmd_status(args: argparse.Namespace) -> int:
    def show(session: "_Session") -> int:
        report = status_report(session)
        if args.json:
            print(json.dumps(report, indent=2, sort_keys=True))
        else:
            for key, value in _status_lines(report):
                print("{:<12} {}".format(key + ":", value))
        return DONE

    return _run(args, show)


def status_report(session: "_Session") -> Dict[str, Any]:
    """Everything `control status` shows, as plain data. Reads only; changes nothing."""
    config = session.config
    control = config.control
    report: Dict[str, Any] = {"enabled": control.enabled, "dry_run": control.dry_run, "config": config.source,
                              "config_phrase": in_source(config),
                              "safe_state": control.safe_state, "floor_percent": control.fan.floor_percent,
                              "curve": control.fan.curve, "driver": control.fan.driver}
    driver = build_fan_driver(control, session.target.npu_smi_argv, session.target.env, session.target.root,
                              config.npu_smi_timeout_seconds)
    if driver is not None:
        probe = driver.probe()
        report["available"], report["detail"] = probe.available, probe.detail
        if probe.available and driver.can_read:
            reading, error = driver.read()
            report["fans"] = error if reading is None else {"mode": reading.mode, "duty_percent": reading.duty_percent}
    report["daemon"] = running_daemon(config.state_dir)
    report["power"] = _power_report(session)
    return report


def _power_report(session: "_Session") -> Dict[str, Any]:
    """{"chips": names, "profiles": {name: {knob: value}}}, or {"error": why npu-smi could not be read}."""
    chips, problem = session.main_table_chips()
    if problem is not None:
        return {"error": problem}
    names = sorted({name or "unknown" for _, _, name in chips})
    families = {chip_family(name) for _, _, name in chips}
    family = families.pop() if len(families) == 1 else None
    return {"chips": names, "profiles": profiles_for(family, session.config.control.power.profiles)}


def _status_lines(report: Dict[str, Any]) -> List[Tuple[str, str]]:
    lines = [("control", ("enabled" if report["enabled"] else "off (control.enabled: false{})".format(
        report["config_phrase"])) + (", dry run" if report["dry_run"] else ""))]
    if "available" in report:
        lines.append(("fan driver", "{}: {}{}".format(report["driver"], "" if report["available"] else
                                                       "unavailable: ", report["detail"])))
    else:
        lines.append(("fan driver", "none"))
    fans = report.get("fans")
    if isinstance(fans, dict):
        lines.append(("fans now", "{} {}%".format(fans["mode"], "?" if fans["duty_percent"] is None
                                                   else fans["duty_percent"])))
    elif fans is not None:
        lines.append(("fans now", "unknown: " + fans))
    curve = ", ".join("{:g}C:{:g}%".format(t, d) for t, d in report["curve"])
    lines.append(("governor", "curve {}; floor {:g}%; safe state {}".format(curve, report["floor_percent"],
                                                                            report["safe_state"])))
    daemon = report["daemon"]
    if daemon is None:
        lines.append(("daemon", "no running npumon drives the fans"))
    else:
        doing = "{} {}%".format(daemon.get("mode"), daemon["duty_percent"]) if daemon.get("duty_percent") is not None \
            else daemon.get("mode")
        lines.append(("daemon", "pid {} drives the fans: {} ({})".format(daemon["pid"], doing, daemon.get("decision"))))
    power = report["power"]
    if "error" in power:
        lines.append(("power", power["error"]))
    else:
        profiles = ", ".join("{} ({})".format(name, ", ".join("{} {}".format(k, v) for k, v in sorted(knobs.items())))
                             for name, knobs in sorted(power["profiles"].items()))
        lines.append(("power", "{}: {}".format(", ".join(power["chips"]), profiles or
                                               "no power knob on this product")))
    return lines


# -- the session: config, target, audit -------------------------------------------------------------------


class _Session:
    def __init__(self, config, target, record: Callable[..., None]):
        self.config = config
        self.target = target
        self.runner = CommandRunner(target.npu_smi_argv, config.npu_smi_timeout_seconds, 1, env=target.env,
                                    spawn=target.spawn)
        self._record = record

    def require_enabled(self, knob: str) -> None:
        if not self.config.control.enabled:
            raise self.refuse(knob, "control is off: set control.enabled: true in {} to let npumon change fans "
                                    "or power".format(file_to_edit(self.config)))

    def refuse(self, knob: str, reason: str, details: Optional[Dict[str, Any]] = None) -> _Refused:
        self._audit("control_refused", "refused ({}): {}".format(knob, reason), "warning",
                    dict(details or {}, knob=knob, reason=reason))
        return _Refused(reason)

    def act(self, knob: str, what: str, run: Callable[[], DriverResult], details: Dict[str, Any],
            warn_daemon: bool = True) -> int:
        """Carry one action out (or, in a dry run, say it), print and audit the result."""
        details = dict(details, knob=knob, by="npumon control")
        if self.config.control.dry_run:
            message = "dry run: would {}".format(what)
            self._audit("control_action", message, "info", dict(details, dry_run=True))
            print(message)
            return DONE
        daemon = running_daemon(self.config.state_dir) if warn_daemon and knob.startswith("fan") else None
        if daemon is not None:
            print("npumon: warning: the daemon (pid {}) drives these fans and will put its own duty back within "
                  "control.verify_seconds ({:g}s); stop it, or set control.enabled: false, for manual control".format(
                      daemon["pid"], self.config.control.verify_seconds), file=sys.stderr)
        result = run()
        if result.ok:
            message = "{}: {}".format(what, result.message)
            self._audit("control_action", message, "info", dict(details, result=result.message))
            print(message)
            return DONE
        message = "could not {}: {}".format(what, result.message)
        self._audit("control_action", message, "critical", dict(details, result=result.message))
        print("npumon: " + message, file=sys.stderr)
        return REFUSED

    def main_table_chips(self) -> Tuple[List[Tuple[int, int, Optional[str]]], Optional[str]]:
        """((npu, chip, name) of every chip npu-smi lists, None), or ([], why npu-smi could not be read)."""
        result = self.runner.run(["info"])
        problem = npu_smi_problem(result)
        if problem is None:
            try:
                return [(chip.npu, chip.chip, chip.name) for chip in parse_info(result.output).chips], None
            except NpuSmiParseError as exc:
                problem = "unreadable output: {}".format(exc)
        return [], "cannot read npu-smi info: {}".format(problem)

    def _audit(self, kind: str, message: str, severity: str, details: Dict[str, Any]) -> None:
        log.info("%s", message)  # the printed line answers the user; this is the audit trail
        self._record(kind, "host", message, severity, details)


def _event_recorder(config) -> Callable[..., None]:
    """record(kind, subject, message, severity, details) into the event history, opened on the first record
    (`status` never opens it). With the history off or unusable only the log has it: an audit problem never
    blocks putting the fans in the safe state."""
    from ..services.events.store import EventStore, EventStoreError, events_path

    stores: List[EventStore] = []

    def record(kind, subject, message, severity, details) -> None:
        if not config.events.enabled:
            return
        try:
            if not stores:
                stores.append(EventStore(events_path(config.state_dir)))
            stores[0].record(kind, subject, message, severity, details)
        except EventStoreError as exc:
            log.warning("not recorded in the event history: %s", exc)

    return record


def _run(args: argparse.Namespace, body: Callable[[_Session], int]) -> int:
    try:
        config = load_command_config(args.config)
        # the printed line is the answer; the audit lines (INFO) go to the event history, and to stderr on request
        setup_logging(args.log_level or ("warning" if config.log_level == "info" else config.log_level))
        with open_target(args, config, require_npu_smi=False) as (target, config_for):
            config = config_for(config)  # a simulated action is recorded with the simulation
            return body(_Session(config, target, _event_recorder(config)))
    except (ConfigError, UserError, NpuSmiMissing) as exc:
        print("npumon: " + str(exc), file=sys.stderr)
        return USAGE_ERROR
    except _Refused as exc:
        print("npumon: refused: " + str(exc), file=sys.stderr)
        return REFUSED
