"""npumon_control_*: what the control service did and does, read from it at scrape time."""

from typing import Any, Iterator, Optional, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .drivers import AUTO, MANUAL
from .policy import CURVE, SAFE, STARTING

# The ControlService that owns the collector (service.py imports this module, so it is not imported back).
ControlServiceLike = Any


class ControlMetrics(Collector):
    """npumon_control_* for /metrics, read from the service at scrape time."""

    def __init__(self, service: ControlServiceLike):
        self.service = service

    def collect(self) -> Iterator[Metric]:
        service = self.service
        actions = CounterMetricFamily("npumon_control_actions", "Control actions by knob and result (ok, failed, "
                                      "refused, dry_run).", labels=("knob", "result"))
        for (knob, result), count in sorted(service.audit.counts().items()):
            actions.add_metric((knob, result), count)
        yield actions
        yield _gauge("npumon_control_dry_run", "1 if control only logs its decisions (control.dry_run).",
                     1 if service.control.dry_run else 0)
        if service.probe is not None:
            yield _gauge("npumon_control_fan_available", "1 if the fan driver is usable, else 0.",
                         1 if service.probe.available else 0)
        state = service.state
        if state.mode != STARTING:
            yield _gauge("npumon_control_fan_safe_state", "1 while the governor holds the fans in the safe state.",
                         1 if state.mode == SAFE else 0)
        duty, mode = _fan_now(service)
        if duty is not None:
            yield _gauge("npumon_control_fan_duty_ratio", "Fan duty npumon set (or read back), 0..1.", duty / 100.0)
        if mode is not None:
            family = GaugeMetricFamily("npumon_control_fan_mode", "1 for the fans' current mode (auto: the "
                                       "firmware's or chip's own control; manual: a duty npumon set).",
                                       labels=("mode",))
            for name in (AUTO, MANUAL):
                family.add_metric((name,), 1 if name == mode else 0)
            yield family
        inputs = service.current_inputs()
        readings = [("chips", inputs.chips)] + ([("ambient", inputs.ambient)] if inputs.ambient is not None else [])
        temperature = GaugeMetricFamily("npumon_control_input_temperature_celsius",
                                        "The temperatures the governor decides on (hottest relevant chip, ambient).",
                                        labels=("input",))
        for name, reading in readings:
            if reading.celsius is not None:
                temperature.add_metric((name,), reading.celsius)
        yield temperature


def _fan_now(service: ControlServiceLike) -> Tuple[Optional[float], Optional[str]]:
    """(duty %, mode) of the fans as npumon last set or read them."""
    state = service.state
    if state.mode == CURVE and state.duty is not None:
        return float(state.duty), MANUAL
    if state.mode == SAFE and state.safe_confirmed:
        if service.control.safe_state != AUTO:
            return 100.0, MANUAL
        reading = service.last_reading
        return (None if reading is None or reading.mode != AUTO else reading.duty_percent), AUTO
    return None, None


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation)
    family.add_metric((), value)
    return family
