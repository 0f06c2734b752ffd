"""`npumon fleet`: the fleet as Prometheus sees it, read from its HTTP query API (never from the hosts).

client.py  Prometheus's /api/v1/query: PrometheusClient, PrometheusError, redact_url
read.py    the queries of the command (FLEET_QUERIES) and read_fleet, which runs them
series.py  a host's series back into a Snapshot and rule facts, for the findings' hints
view.py    host, chip and finding rows, build_view and the orderings (pure)
render.py  the findings' summaries and hints, the text tables and the npumon.fleet/v1 document (pure)
cli.py     the argparse command and its exit codes
"""
