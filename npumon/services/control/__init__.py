"""Fan and power control under a safety governor (off unless `control.enabled: true`).

    settings.py   the `control:` config section and its checks
    policy.py     the governor: temperatures, driver results and the clock in, one decision out (pure)
    drivers.py    the fan drivers (npu-smi pwm, Linux hwmon, a user command), each I/O behind one function
    power.py      power profiles mapped per product to the knobs that exist
    watchdog.py   a separate process that returns the fans to the safe state if npumon dies
    service.py    the daemon service: the control loop (probe, decide, act, verify, fail safe)
    audit.py      every action and refusal counted, logged and recorded in the event history
    metrics.py    npumon_control_* for /metrics
    statefile.py  <state_dir>/control.json: the running daemon's state, for `npumon control`

The ambient temperature source is npumon/sources/ambient.py (with the hwmon files, npumon/sources/hwmon.py); the
commands are npumon/cli/control.py.
"""
