"""Reading the fleet from Prometheus: the fleet-wide queries, then one query per host with findings for
the series its hints are rendered from. The only module of the fleet that queries.
"""

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Optional, Sequence

from .client import PrometheusClient, PrometheusError
from .render import render_findings
from .series import host_of, subject_facts
from .view import FleetView, build_view

# name -> PromQL; {jobs} is the job matcher.
FLEET_QUERIES = {
    "up": 'up{{{jobs}}}',
    "chip_info": 'npumon_chip_info{{{jobs}}}',
    "health": 'npumon_chip_health{{{jobs}}} == 1',
    "temperature": 'npumon_chip_temperature_celsius{{{jobs}}}',
    "power": 'npumon_chip_power_watts{{{jobs}}}',
    "aicore": 'npumon_chip_utilization_ratio{{{jobs},engine="aicore"}}',
    "ecc_double": 'sum without (memory, bit) (npumon_chip_ecc_errors{{{jobs},bit="double"}})',
    "isolated_pages": 'sum without (memory) (npumon_chip_ecc_isolated_pages{{{jobs}}})',
    "sources_down": 'npumon_source_up{{{jobs}}} == 0 unless on (job, instance, source) '
                    'npumon_source_unsupported{{{jobs}}} == 1',
    "findings": 'npumon_finding_active{{{jobs}}} == 1',
}
QUERY_WORKERS = 8  # queries in flight at once against one Prometheus
JOB_DISCOVERY = 'group by (job) (last_over_time(npumon_build_info[1h]))'


def _label_value(value: str) -> str:
    return json.dumps(value)  # a PromQL string literal: double quotes, backslash escapes


def read_fleet(client: PrometheusClient, jobs: Optional[Sequence[str]], host_label: str,
               rules: Dict[str, Any], params: Dict[str, float]) -> FleetView:
    """The fleet at one instant, of the given jobs or else of every job with npumon_build_info of the last hour."""
    if not jobs:
        jobs = sorted({labels.get("job", "") for labels, _ in client.query(JOB_DISCOVERY)} - {""})
        if not jobs:
            raise PrometheusError("Prometheus at {} has no npumon_build_info series from the last hour: is it "
                                  "scraping npumon? (or name the scrape job with --job)".format(client.display_url))
    job_matcher = 'job=~{}'.format(_label_value("|".join(_regex_escape(job) for job in jobs)))
    now = time.time()
    with ThreadPoolExecutor(max_workers=QUERY_WORKERS) as pool:
        # At once: each query waits on Prometheus, not on us; one after another they add up on a big fleet.
        futures = {name: pool.submit(client.query, expr.format(jobs=job_matcher), now)
                   for name, expr in FLEET_QUERIES.items()}
        results = {name: future.result() for name, future in futures.items()}
    if not results["up"] and not results["chip_info"]:  # no target, nor series of one (federated: no `up`)
        raise PrometheusError(_no_targets(client, jobs))
    # A finding's host is its host label, or its instance: select the host's series by the same label.
    selecting_label = {host_of(labels, host_label): host_label if labels.get(host_label) else "instance"
                       for labels, _ in results["findings"]}
    cache: Dict[str, Dict[str, Dict[str, Any]]] = {}

    def host_facts(host: str) -> Dict[str, Dict[str, Any]]:
        selector = '{{{},{}={},__name__=~"npumon_(chip|host|source|snapshot)_.+"}}'.format(
            job_matcher, selecting_label.get(host, host_label), _label_value(host))
        return subject_facts(client.query(selector, at=now))

    def facts_of_host(host: str) -> Dict[str, Dict[str, Any]]:
        if host not in cache:
            cache[host] = host_facts(host)
        return cache[host]

    hosts_with_findings = sorted({host_of(labels, host_label) for labels, _ in results["findings"]})
    with ThreadPoolExecutor(max_workers=QUERY_WORKERS) as pool:
        # One query per host with findings (its series feed the hints), fetched in parallel up front.
        for host, facts in zip(hosts_with_findings, pool.map(host_facts, hosts_with_findings)):
            cache[host] = facts
    findings = render_findings(results["findings"], host_label, rules, params, facts_of_host)
    return build_view(client.display_url, jobs, now, results, findings, host_label)


def _no_targets(client: PrometheusClient, jobs: Sequence[str]) -> str:
    """No target of the jobs asked for: say so, with the jobs that do scrape npumon, to pick from."""
    known = sorted({labels.get("job", "") for labels, _ in client.query(JOB_DISCOVERY)} - {""})
    return "no targets matched: Prometheus at {} has no target of job {} ({})".format(
        client.display_url, ", ".join(jobs),
        "jobs scraping npumon: " + ", ".join(known) if known else "no job has npumon_build_info in the last hour")


def _regex_escape(text: str) -> str:
    """A job name matched literally inside `job=~"..."` (a job may hold dots or other regex characters)."""
    return "".join("\\" + char if char in ".^$*+?()[]{}|\\" else char for char in text)
