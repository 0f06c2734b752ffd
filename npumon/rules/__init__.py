"""Findings from Snapshots: expr.py (the expression language), loader.py (rule files), engine.py, facts.py (what a
rule can see), template.py (summaries and hints), history.py (windows), compat.py (driver/firmware versions)."""
