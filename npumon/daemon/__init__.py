"""`npumon run`: daemon.py (scheduler and lifecycle), state.py (what readers see, health), services.py (the list of
services), sdnotify.py (systemd)."""
