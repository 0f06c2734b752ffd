"""The hccn_tool source: parse.py and optical.py (pure parsers of its answers), source.py (polling, per chip)."""
