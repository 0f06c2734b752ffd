"""Configuration parsing that knows no source: schema.py (the core settings' dataclasses and Section), load.py
(YAML -> dataclass, validated), location.py (which file a command reads), errors.py (ConfigError). The whole
config, with every source's and service's section, is put together above them in npumon/settings.py.

Kept free of imports so that any module can import config.errors without loading the whole schema.
"""
