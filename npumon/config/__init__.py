"""Configuration: schema.py (the dataclasses), load.py (YAML -> Config, validated), errors.py (ConfigError).

Kept free of imports so that any module can import config.errors without loading the whole schema.
"""
