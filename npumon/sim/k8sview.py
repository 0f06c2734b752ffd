"""What a running simulation's API-server stand-in holds (sim/cluster.py), read over its HTTP API with the token of
the kubeconfig under the simulation's state directory:

    python -m npumon.sim.k8sview DIR       # DIR: the --sim-state of `npumon run --simulate`

prints every node's conditions and taints, then the Events of the namespace (default `default`), oldest first.
"""

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any, Dict, List

from .cluster import read_kubeconfig

TIMEOUT_SECONDS = 5.0
MAX_ANSWER_BYTES = 16 * 1024 * 1024


def get(kubeconfig: Dict[str, str], path: str) -> Dict[str, Any]:
    request = urllib.request.Request(kubeconfig["server"] + path,
                                     headers={"Authorization": "Bearer " + kubeconfig["token"]})
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:
        return json.loads(answer.read(MAX_ANSWER_BYTES))


def render(nodes: Dict[str, Any], events: Dict[str, Any]) -> List[str]:
    lines = []
    for node in nodes.get("items") or []:
        lines.append("node {}".format(node["metadata"]["name"]))
        for condition in node["status"].get("conditions") or []:
            lines.append("  {:<16} {:<5} {:<20} since {}  {}".format(
                condition["type"], condition["status"], condition.get("reason", ""),
                condition.get("lastTransitionTime", "-"), condition.get("message", "")))
        for taint in node["spec"].get("taints") or []:
            lines.append("  taint {}={}:{}".format(taint["key"], taint.get("value", ""), taint["effect"]))
    items = events.get("items") or []
    lines.append("events ({})".format(len(items)))
    for event in items:
        lines.append("  {}  {:<7} {:<20} {}".format(event.get("firstTimestamp", "-"), event.get("type", ""),
                                                    event.get("reason", ""), event.get("message", "")))
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m npumon.sim.k8sview", description=__doc__.splitlines()[0])
    parser.add_argument("state_dir", metavar="DIR", help="the --sim-state DIR of `npumon run --simulate`")
    parser.add_argument("--namespace", default="default", help="the Events' namespace (default: default)")
    args = parser.parse_args(argv)
    try:
        kubeconfig = read_kubeconfig(args.state_dir)
        nodes = get(kubeconfig, "/api/v1/nodes")
        events = get(kubeconfig, "/api/v1/namespaces/{}/events".format(args.namespace))
    except (OSError, ValueError) as exc:  # urllib's errors are OSErrors
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        print("npumon: no simulated Kubernetes node answers for {} ({}): run `npumon run --simulate --sim-state "
              "DIR` with handoff.kubernetes.enabled".format(args.state_dir, reason), file=sys.stderr)
        return 2
    print("\n".join(render(nodes, events)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
