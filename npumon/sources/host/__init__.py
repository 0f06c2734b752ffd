"""The host source: source.py (the contract, facts, metrics), reader.py (reading), parse.py (parsers)."""
