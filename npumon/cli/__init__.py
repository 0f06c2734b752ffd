"""The `npumon` command: parser.py holds every command's options, main.py runs one, one module per command family;
common.py holds what they share."""
