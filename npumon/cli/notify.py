"""`npumon notify test [--receiver NAME] [--resolve]`: send a test alert through the real path (the
receiver's formatting, signing, TLS and HTTP client) and print what each receiver answered.

Exit 0 when every receiver accepted it, 1 when one did not, 2 on a bad config or argument. It does not
touch the daemon's outbox, so it works for any user who can read the config and its secrets.
"""

import argparse
import sys
import time


USAGE_ERROR = 2
TEST_RULE = "npumon-test"


def cmd_notify_test(args: argparse.Namespace) -> int:
    import socket

    from ..config.errors import ConfigError
    from ..config.location import in_source
    from ..settings import load_command_config
    from ..model import Finding
    from ..services.notify.alert import alert_from_finding
    from ..services.notify.flavour import DELIVERED
    from ..services.notify.receiver import Receiver
    from ..services.notify.secrets import SecretError

    try:
        config = load_command_config(args.config)
    except ConfigError as exc:
        return _error(str(exc))
    if not config.notify.receivers:
        return _error("no receivers configured (notify.receivers{})".format(in_source(config)))
    chosen = [(index, receiver) for index, receiver in enumerate(config.notify.receivers)
              if args.receiver is None or receiver.name == args.receiver]
    if not chosen:
        return _error("--receiver: unknown receiver {!r} (known: {})".format(
            args.receiver, ", ".join(receiver.name for receiver in config.notify.receivers)))
    try:
        receivers = [Receiver.from_config(receiver, index, config.source) for index, receiver in chosen]
    except SecretError as exc:
        return _error(str(exc))
    host = socket.gethostname()
    now = time.time()
    finding = Finding(rule=TEST_RULE, severity="info", subject="host",
                      summary="test notification from npumon on {}".format(host),
                      hint="Nothing is wrong: `npumon notify test` checks that alerts reach this receiver.",
                      since=now)
    alert = alert_from_finding(finding, host, config.notify.labels)
    if args.resolve:
        alert = alert.resolved(now)
    answers = []
    for receiver in receivers:
        answer = receiver.send([alert], host, now, config.notify.external_url)
        receiver.close()
        answers.append({"receiver": receiver.name, "type": receiver.kind, "endpoint": receiver.endpoint,
                        "delivered": answer.outcome == DELIVERED, "outcome": _outcome_text(answer.outcome),
                        "detail": answer.detail})
        if not args.json:  # each answer as it comes: a slow receiver does not hide the others'
            print("{receiver} ({type}, {endpoint}): {outcome} - {detail}".format(**answers[-1]))
    if args.json:
        import json

        print(json.dumps(answers, indent=2))
    return 0 if all(answer["delivered"] for answer in answers) else 1


def _outcome_text(outcome: str) -> str:
    """A one-shot send is never retried: a temporary failure is a failure here, said as one."""
    from ..services.notify.flavour import RETRY

    return "failed (temporary: the daemon would retry it)" if outcome == RETRY else outcome


def _error(message: str) -> int:
    print("npumon: " + message, file=sys.stderr)
    return USAGE_ERROR
