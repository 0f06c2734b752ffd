"""Ascend driver faults: the fault-code catalogue (catalogue.csv, levels and actions in actions.yaml) and
the kernel-log patterns (patterns.yaml) that the kmsg source matches."""
