"""Every origin of numbers: the contract (base.py), THE list (registry.py), and one module or package per source.

Kept empty of imports: the probe's child process (sources/probe/child.py) imports this package, possibly on an
older Python than npumon's own.
"""
