"""What the daemon runs besides polling: events/ (SQLite history), notify/ (alert delivery), control/ (fans and power);
sections.py declares their config sections."""
