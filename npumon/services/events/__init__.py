"""The event history: what happened on this host, kept in <state_dir>/events.sqlite across restarts.

    store.py    the SQLite file: events, the findings and chips to take over on the next start, retention
    observe.py  what an evaluation means for the history: chip changes and transition events (pure)
    service.py  the daemon service: one writer thread, acknowledgements, restoring the rule engine
"""
