"""What npumon shows: exporter.py and families.py (/metrics), web.py (the HTTP server), report.py (check table,
JSON, Nagios), textfile.py (node_exporter's textfile collector)."""
