"""Fan and power control under a safety governor (off unless `control.enabled: true`).

    settings.py  the `control:` config section and its checks
    policy.py    the governor: temperatures, driver results and the clock in, one decision out (pure)
    drivers.py   the fan drivers (npu-smi pwm, Linux hwmon, a user command), each I/O behind one function
    hwmon.py     finding hwmon devices and reading/writing their files
    ambient.py   the inlet/board temperature source the ambient rule reads
    power.py     power profiles mapped per product to the knobs that exist
    watchdog.py  a separate process that returns the fans to the safe state if npumon dies
    service.py   the daemon service: the control loop, audit, metrics
    cli.py       `npumon control status|fan|power`
"""
