"""The npu-smi source: table.py and kv.py (pure parsers of its outputs), common.py, source.py (polling and freshness)."""
