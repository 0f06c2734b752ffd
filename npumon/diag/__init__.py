"""`npumon diag -r 1|2|3`: on-demand diagnostics, never run by the daemon on its own.

Level 1 (deploy.py) reads the host once and keeps the deployment findings; levels 2 and 3 run workloads on
each idle chip in a child process through pyACL (child.py, workloads.py), judge the measured figures against
the product's published ones (expected.py, judge.py) and report them like `check` does (report.py). This
package's __init__ stays empty of imports: the child, which may run under CANN's Python, imports only
protocol.py and workloads.py from it, and the probe's operator builder (sources/probe/opmodel.py).
"""
