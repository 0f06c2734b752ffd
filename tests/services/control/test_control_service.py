"""The control service in-process: audit and metrics, a crash of the control code, stopping, outside changes,
dry runs; then the whole loop against the simulated 310B board (npu-smi driver, board sensor from npu-smi)
and against a fake hwmon tree (hwmon driver, hwmon inlet sensor): the curve and the ambient rule acting,
and the chips cooling as the duty rises. A 910B host reports fan control unavailable."""

import dataclasses
import json
import logging
import shutil
import subprocess
import time

from prometheus_client import CollectorRegistry, generate_latest

from npumon.sim.target import simulated_target
from npumon.sources.collection import SourceSet
from npumon.sources.target import Target
from npumon.settings import parse_config
from npumon.services.control import service as service_module
from npumon.sources.ambient import AmbientSource, mcu_temperatures
from npumon.sources.base import Parts
from npumon.services.control.drivers import DriverResult, FanReading, HwmonFanDriver, NpuSmiFanDriver, Probe
from npumon.services.control.policy import CURVE, SAFE
from npumon.services.control.service import REPROBE_SECONDS, ControlService, control_services
from npumon.services.control.statefile import STATE_FILE
from npumon.services.control.settings import AmbientConfig
from npumon.model import ChipSample, HostSample, Snapshot, SourceStatus
from npumon.sim.simulation import prepare_simulation
from npumon.sources.runner import CommandRunner
from service_context import open_context


class Events:
    def __init__(self):
        self.recorded = []

    def __call__(self, kind, subject, message, severity, details):
        self.recorded.append((kind, subject, message, severity, details))

    def messages(self, kind=None):
        return [message for k, _, message, _, _ in self.recorded if kind is None or k == kind]


class Fans:
    name = "fake"
    can_read = True

    def __init__(self, available=True):
        self.available = available
        self.mode, self.duty = "auto", 40
        self.calls = []
        self.probes = 0

    def probe(self):
        self.probes += 1
        return Probe(self.available, "fake fans" if self.available else "no fans here")

    def read(self):
        return FanReading(self.mode, self.duty), None

    def set_duty(self, percent):
        self.calls.append(("duty", percent))
        self.mode, self.duty = "manual", percent
        return DriverResult(True, "set")

    def set_auto(self):
        self.calls.append(("auto", None))
        self.mode = "auto"
        return DriverResult(True, "auto")

    def spec(self):
        return {"fake": True}

    def abort(self):
        self.calls.append(("abort", None))


class Watchdog:
    instances = []

    def __init__(self, spec, safe_state, timeout):
        self.spec, self.safe_state, self.timeout = spec, safe_state, timeout
        self.beats, self.state, self.status = 0, "new", None
        Watchdog.instances.append(self)

    def start(self):
        self.state = "started"

    @property
    def pid(self):
        return 4242

    def exit_status(self):
        return self.status

    def beat(self):
        self.beats += 1
        return True

    def disarm(self):
        self.state = "disarmed"

    def abandon(self):
        self.state = "abandoned"


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def control_config(text="", tmp_path=None):
    state = "state_dir: {}\n".format(tmp_path) if tmp_path is not None else ""
    return parse_config(state + "control:\n  enabled: true\n" + text).control


def snapshot(chip, at, ambient=None):
    sources = {"npu-smi": SourceStatus(ok=True, last_success=at), "ambient": SourceStatus(ok=True, last_success=at)}
    return Snapshot(time=at, host=HostSample(ambient_temperature_celsius=ambient),
                    chips=[ChipSample(npu=0, chip=0, temperature_celsius=chip)], sources=sources)


def make_service(text="", fans=None, tmp_path=None):
    clock = Clock()
    events = Events()
    fans = fans or Fans()
    Watchdog.instances = []
    service = ControlService(control_config(text, tmp_path), fans, events, clock=clock,
                             state_dir=None if tmp_path is None else str(tmp_path),
                             driver_factory=lambda spec: fans, watchdog_factory=Watchdog)
    return service, fans, events, clock


def metrics_text(service):
    registry = CollectorRegistry()
    for collector in service.collectors():
        registry.register(collector)
    return generate_latest(registry).decode()


# -- the service with fakes -----------------------------------------------------------------------------------


def test_a_tick_drives_the_fans_audits_the_action_and_beats_the_watchdog():
    service, fans, events, clock = make_service()
    service.on_evaluation(snapshot(65.0, clock.now), [], [])
    service.tick()
    assert fans.calls == [("duty", 55)] and service.state.mode == CURVE
    assert events.recorded[0][:2] == ("control_action", "host")
    assert events.recorded[0][2] == "set the fan duty to 55% (taking over the fans: chips 65 C -> 55%)"
    assert events.recorded[0][4]["knob"] == "fan_duty"
    watchdog = Watchdog.instances[0]
    assert watchdog.state == "started" and watchdog.spec == {"fake": True} and watchdog.safe_state == "auto"
    clock.now += 5
    service.tick()
    assert watchdog.beats == 1 and fans.calls == [("duty", 55)]


def test_metrics_pass_promtool_and_show_actions_duty_and_mode():
    service, fans, events, clock = make_service()
    service.on_evaluation(snapshot(65.0, clock.now), [], [])
    service.tick()
    text = metrics_text(service)
    assert 'npumon_control_actions_total{knob="fan_duty",result="ok"} 1.0' in text
    assert 'npumon_control_actions_total{knob="fan_mode",result="failed"} 0.0' in text
    assert "npumon_control_fan_duty_ratio 0.55" in text
    assert 'npumon_control_fan_mode{mode="manual"} 1.0' in text
    assert "npumon_control_fan_safe_state 0.0" in text and "npumon_control_fan_available 1.0" in text
    assert 'npumon_control_input_temperature_celsius{input="chips"} 65.0' in text
    if shutil.which("promtool"):
        checked = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
        assert (checked.returncode, checked.stdout, checked.stderr) == (0, b"", b"")


def test_a_crash_of_the_control_code_puts_the_fans_in_the_safe_state(monkeypatch, caplog):
    service, fans, events, clock = make_service()
    service.on_evaluation(snapshot(65.0, clock.now), [], [])
    service.tick()

    def broken(*_args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(service_module, "decide", broken)
    for _ in range(3):
        clock.now += 5
        service.tick()
    assert fans.calls == [("duty", 55), ("auto", None)]  # once: the safe state is known to be applied
    assert service.state.mode == SAFE and service.state.safe_confirmed
    assert "the control loop failed (ZeroDivisionError)" in events.messages("control_action")[-1]
    assert sum("the control loop failed" in record.getMessage() for record in caplog.records
               if record.levelname == "ERROR" and record.exc_info) == 1  # one traceback, not one per tick


def test_stopping_puts_the_fans_in_the_safe_state_and_disarms_the_watchdog(tmp_path):
    service, fans, events, clock = make_service("  safe_state: full\n", tmp_path=tmp_path)
    service.on_evaluation(snapshot(65.0, clock.now), [], [])
    service.tick()
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert (state["mode"], state["duty_percent"], state["watchdog_pid"]) == ("curve", 55, 4242)
    service.close()
    assert fans.calls[-2:] == [("abort", None), ("duty", 100)]
    assert Watchdog.instances[0].state == "disarmed"
    assert not (tmp_path / STATE_FILE).exists()
    assert events.messages()[-1] == "put the fans in the safe state (full duty) (npumon is stopping)"
    service.tick()  # a tick that was queued before the stop does nothing
    assert fans.calls[-1] == ("duty", 100)


def test_control_json_is_written_when_the_state_changes_and_retried_after_a_failure(tmp_path, caplog):
    from npumon.services.control.statefile import StateFile

    state_file = StateFile(str(tmp_path / "missing"))
    with caplog.at_level(logging.WARNING, logger="npumon.services.control.statefile"):
        state_file.write({"pid": 1, "mode": "curve"}, 10.0)
        state_file.write({"pid": 1, "mode": "curve"}, 11.0)
    assert [record.getMessage().split(" (")[0] for record in caplog.records] == [
        "cannot write {}".format(tmp_path / "missing" / STATE_FILE)]  # said once, tried again
    (tmp_path / "missing").mkdir()
    state_file.write({"pid": 1, "mode": "curve"}, 12.0)
    assert json.loads((tmp_path / "missing" / STATE_FILE).read_text()) == {"pid": 1, "mode": "curve", "written": 12.0}
    state_file.write({"pid": 1, "mode": "curve"}, 13.0)  # nothing changed: not rewritten
    assert json.loads((tmp_path / "missing" / STATE_FILE).read_text())["written"] == 12.0
    assert len(caplog.records) == 1
    state_file.remove()
    state_file.remove()  # already gone: fine
    assert not (tmp_path / "missing" / STATE_FILE).exists()


def test_fans_changed_outside_npumon_are_put_back():
    service, fans, events, clock = make_service("  verify_seconds: 30\n")
    service.on_evaluation(snapshot(65.0, clock.now), [], [])
    service.tick()
    fans.mode, fans.duty = "manual", 80  # `npumon control fan --duty 80` by hand
    clock.now += 31
    service.on_evaluation(snapshot(65.0, clock.now), [], [])
    service.tick()
    assert fans.calls[-1] == ("duty", 55)
    assert "fans changed outside npumon (found manual 80%); re-asserting 55%" in events.messages()[-1]


def test_the_watchdog_having_acted_is_noticed_and_a_new_one_started():
    service, fans, events, clock = make_service()
    service.on_evaluation(snapshot(65.0, clock.now), [], [])
    service.tick()
    Watchdog.instances[0].status = 3  # it applied the safe state (the loop had stalled)
    clock.now += 5
    service.on_evaluation(snapshot(65.0, clock.now), [], [])
    service.tick()
    assert "the fan watchdog put the fans in the safe state" in events.messages()[1]
    assert len(Watchdog.instances) == 2 and Watchdog.instances[1].state == "started"
    assert fans.calls[-1] == ("duty", 55)  # the governor takes over again


def test_a_dry_run_decides_and_logs_but_touches_nothing():
    service, fans, events, clock = make_service("  dry_run: true\n")
    service.on_evaluation(snapshot(65.0, clock.now), [], [])
    service.tick()
    clock.now += 100
    service.tick()  # stale: would go safe
    service.close()
    assert fans.calls == [("abort", None)] and Watchdog.instances == []
    assert events.messages() == [
        "dry run: would set the fan duty to 55% (taking over the fans: chips 65 C -> 55%)",
        "dry run: would put the fans in the safe state (automatic control) (chip temperature is 100s old "
        "(limit 60s))"]
    assert 'npumon_control_actions_total{knob="fan_duty",result="dry_run"} 1.0' in metrics_text(service)
    assert "npumon_control_dry_run 1.0" in metrics_text(service)


def test_an_unavailable_driver_is_refused_once_and_probed_again_later():
    fans = Fans(available=False)
    service, fans, events, clock = make_service(fans=fans)
    service.on_evaluation(snapshot(65.0, clock.now), [], [])
    for _ in range(3):
        service.tick()
        clock.now += 5
    assert fans.probes == 1 and fans.calls == []
    assert events.recorded == [("control_refused", "host", "fan control unavailable: no fans here", "warning",
                                {"knob": "fan_duty", "driver": "fake"})]
    clock.now += REPROBE_SECONDS
    service.tick()
    assert fans.probes == 2 and len(events.recorded) == 1  # same reason: not recorded again
    assert "npumon_control_fan_available 0.0" in metrics_text(service)


def test_the_daemon_gets_no_control_service_unless_enabled(tmp_path):
    def context(text):
        config = parse_config("state_dir: {}\nevents: {{enabled: false}}\n{}".format(tmp_path, text))
        sources = SourceSet(config, Target(["npu-smi"], None, str(tmp_path)))
        return open_context(config, tmp_path, npu_smi=sources.npu_smi)

    assert control_services(context("")) == []
    assert control_services(context("control: {enabled: true, fan: {driver: none}}")) == []
    shared = context("control: {enabled: true}")
    (service,) = control_services(shared)
    assert service.name == "control" and service.driver.runner is shared.npu_smi  # the one npu-smi pool
    service.close()  # a reload restarts the services: the pool they share with the sources stays open
    assert shared.npu_smi.run(["-v"]).error != "not run: npumon is shutting down"


# -- the simulated 310B board, end to end ----------------------------------------------------------------------


def scenario(tmp_path, chip, board, name="board.yaml"):
    path = tmp_path / name
    path.write_text("product: atlas-200i-a2\nchips:\n  default:\n    temperature_celsius: {}\n"
                    "    board_temperature_celsius: {}\n".format(chip, board))
    return str(path)


def sim_loop(tmp_path, chip, board, time_scale=0.0, extra=""):
    sim = prepare_simulation(str(tmp_path / "sim"), scenario(tmp_path, chip, board), time_scale=time_scale)
    config = parse_config("poll: {table_seconds: 1}\ncontrol:\n  enabled: true\n  watchdog: false\n"
                          "  ambient: {sensor: npu-smi}\n" + extra)
    target = simulated_target(sim)
    collection = SourceSet(config, target)
    # npu-smi answered in-process (sim.spawn): no interpreter start per pwm call
    runner = CommandRunner(sim.npu_smi_argv, 10, 1, env=sim.env, spawn=sim.spawn)
    driver = NpuSmiFanDriver(runner, sim.npu_smi_argv, sim.env, 10)
    events = Events()
    service = ControlService(config.control, driver, events)

    def poll_and_tick():
        collection.poll("npu-smi")
        collection.poll("ambient")
        current = collection.snapshot()
        service.on_evaluation(current, [], [])
        service.tick()
        return current

    return service, driver, poll_and_tick, events


def test_on_the_310b_board_the_curve_sets_the_duty_from_the_chip_temperature(tmp_path):
    service, driver, poll_and_tick, events = sim_loop(tmp_path, chip=65, board=30)
    current = poll_and_tick()
    assert current.host.ambient_temperature_celsius == 30.0 and current.sources["ambient"].ok
    assert driver.read() == (FanReading("manual", 55), None)
    assert events.messages()[0] == "set the fan duty to 55% (taking over the fans: chips 65 C, ambient 30 C -> 55%)"


def test_on_the_310b_board_a_hot_board_sensor_raises_the_duty_to_the_ambient_minimum(tmp_path):
    service, driver, poll_and_tick, events = sim_loop(tmp_path, chip=50, board=40)
    poll_and_tick()
    assert driver.read() == (FanReading("manual", 60), None)  # the curve alone would give 35%


def test_the_loop_closes_the_chips_cool_as_the_duty_rises(tmp_path):
    # a hot chip, scenario time at 400x: the 20 s cooling time constant passes in 0.05 s, and the 0.15 s wait is
    # a scenario minute (longer on a loaded machine, which only cools the chip further)
    service, driver, poll_and_tick, events = sim_loop(tmp_path, chip=78, board=30, time_scale=400.0,
                                                      extra="  fan: {min_hold_seconds: 0}\n")
    before = poll_and_tick()
    assert driver.read()[0].duty_percent == 85
    time.sleep(0.15)
    after = poll_and_tick()  # polls the cooler chip, then lowers the duty for it (no hold time here)
    cooled = before.chips[0].temperature_celsius - after.chips[0].temperature_celsius
    assert cooled >= 8  # 0.25 C per percent above the default 40%: about 11 C at 85%
    assert driver.read()[0].duty_percent < 85
    assert events.messages()[-1].startswith("set the fan duty to")
    assert "lowering: chips {:g} C".format(after.chips[0].temperature_celsius) in events.messages()[-1]


def test_a_910b_host_reports_fan_control_unavailable_with_the_reason(tmp_path):
    sim = prepare_simulation(str(tmp_path), "healthy", product="atlas-800i-a2", time_scale=0)
    # npu-smi answered in-process (sim.spawn): no interpreter start per pwm call
    runner = CommandRunner(sim.npu_smi_argv, 10, 1, env=sim.env, spawn=sim.spawn)
    driver = NpuSmiFanDriver(runner, sim.npu_smi_argv, sim.env, 10)
    events = Events()
    service = ControlService(control_config(), driver, events)
    service.on_evaluation(snapshot(65.0, time.time()), [], [])
    service.tick()
    assert events.recorded[0][0] == "control_refused"
    assert events.recorded[0][2].startswith(
        "fan control unavailable: npu-smi: This device does not support querying pwm-mode.")
    service.close()  # never took the fans over: nothing to hand back


def test_the_910b_board_sensors_come_from_the_mcu_block_of_temp(tmp_path):
    sim = prepare_simulation(str(tmp_path), "overheat", time_scale=0)

    class Recording(CommandRunner):
        calls = []

        def run(self, args, timeout_seconds=None, **options):
            self.calls.append(list(args))
            return super().run(args, timeout_seconds, **options)

    source = AmbientSource(AmbientConfig(sensor="npu-smi"), sim.root, Recording(sim.npu_smi_argv, 10, 1, env=sim.env))
    source.poll("ambient", [ChipSample(npu=0, chip=0), ChipSample(npu=1, chip=0)])
    now = time.time()
    host = source.contribute(Parts(time=now, host=HostSample()), now).host
    assert host.ambient_temperature_celsius == 48.0  # device 0's board in the overheat scenario
    assert Recording.calls == [["info", "-t", "temp", "-i", "0"], ["info", "-t", "temp", "-i", "1"]]
    assert mcu_temperatures("\tNPU Temperature (C)            : 39\n\tChip ID                        : 0\n\n"
                            "\tLM75A_TE (C)                   : 36\n\tLM75B_TE (C)                   : NA\n"
                            "\tChip Name                      : MCU\n") == [36.0]


# -- a fake hwmon tree: hwmon fans and an hwmon inlet sensor ------------------------------------------------------


def hwmon_host(root):
    base = root / "sys" / "class" / "hwmon"
    fan = base / "hwmon1"
    fan.mkdir(parents=True)
    (fan / "name").write_text("pwmfan\n")
    (fan / "pwm1").write_text("90\n")
    (fan / "pwm1_enable").write_text("2\n")
    sensors = base / "hwmon2"
    sensors.mkdir()
    (sensors / "name").write_text("nct6775\n")
    (sensors / "temp1_label").write_text("SYSTIN\n")
    (sensors / "temp1_input").write_text("28000\n")
    (sensors / "temp2_label").write_text("CPUTIN\n")
    (sensors / "temp2_input").write_text("61000\n")
    return fan, sensors


def test_hwmon_fans_follow_the_curve_and_the_hwmon_inlet_sensor(tmp_path):
    fan, sensors = hwmon_host(tmp_path)
    config = parse_config("control:\n  enabled: true\n  watchdog: false\n  fan: {driver: hwmon, hwmon_name: pwmfan}\n"
                          "  ambient: {sensor: hwmon, hwmon_name: nct6775, hwmon_label: SYSTIN}\n")
    clock = Clock(time.time())
    source = AmbientSource(config.control.ambient, str(tmp_path), CommandRunner(["npu-smi"], 5, 1), clock=clock)
    service = ControlService(config.control, HwmonFanDriver(str(tmp_path), "pwmfan", [1]), Events(), clock=clock)

    def tick(chip):
        source.poll("ambient", [])
        current = snapshot(chip, clock.now)
        host = source.contribute(Parts(time=clock.now, host=current.host), clock.now).host
        current = dataclasses.replace(current, host=host, sources=dict(current.sources, **source.statuses(clock.now)))
        service.on_evaluation(current, [], [])
        service.tick()
        clock.now += 5
        return current

    assert tick(70.0).host.ambient_temperature_celsius == 28.0  # SYSTIN, not the hotter CPUTIN
    assert ((fan / "pwm1_enable").read_text(), (fan / "pwm1").read_text()) == ("1", "166")  # 65%
    tick(72.0)
    assert (fan / "pwm1").read_text() == "179"  # 70%: up at once
    (sensors / "temp1_input").write_text("38500\n")  # the inlet heats up while the chips cool down
    clock.now += 60  # past the hold time
    tick(40.0)
    assert (fan / "pwm1").read_text() == "153"  # 60%: the ambient rule, although the curve wants 30%
    (sensors / "temp1_input").unlink()  # the sensor goes away: after stale_after, the safe state
    clock.now += 60
    tick(40.0)
    assert (fan / "pwm1_enable").read_text() == "2"
