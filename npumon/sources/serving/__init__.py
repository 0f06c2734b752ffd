"""The serving-queue source: config.py (the section), fetch.py (one bounded HTTP GET), source.py."""
