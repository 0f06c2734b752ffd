"""The `npumon` command: main.py builds the parser; one module per command family; common.py holds what they share."""
