"""The `npumon` command line: the parser (parser.py), then the command's module, one per command family.

Exit codes: `check` follows the Nagios plugin convention (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN), bad usage
included (one `NPU UNKNOWN - ...` line: see common.CommandParser and nagios_usage); every other command exits 0
on success and 2 on bad usage or bad config, with a one-line message and no traceback. No parser accepts
abbreviated options.
"""

import sys
from typing import Optional, Sequence

from .common import USAGE_ERROR
from .parser import build_parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `npumon check | head`: the reader has gone; the verdict still counts
        _quiet_stdout()
        return getattr(args, "exit_code", 0)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that Python's flush at exit does not complain about the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
