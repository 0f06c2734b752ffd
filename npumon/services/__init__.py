"""What the daemon runs besides polling: events/ (SQLite history), notify/ (alert delivery), control/ (fans and power);
context.py is what each of them is built from (never the daemon itself); sections.py declares their config sections."""
