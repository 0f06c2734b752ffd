"""The host source: source.py (the contract, facts, metrics), collector.py (reading), parse.py (parsers)."""
