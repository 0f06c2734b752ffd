"""The host source: source.py (reading and the contract), parse.py (pure parsers)."""
