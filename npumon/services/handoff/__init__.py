"""Hand-off to the cluster: the sinks that carry the host's and chips' verdicts to Kubernetes."""
