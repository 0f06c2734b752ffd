"""`npumon top`'s screen, as pure functions of the `/status` document (npumon.check/v1) and the view's state:
bars and sparklines (widgets), chip rows, their order and filter (rows), the frame (frame), the keys (keys) and
the history the detail view draws (history). No terminal I/O here: npumon/cli/top.py draws the lines."""
