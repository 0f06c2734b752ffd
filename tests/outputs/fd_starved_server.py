"""A WebServer in a process that runs out of file descriptors on command, for test_web_limits.py.

Prints its port, then answers one line per command on stdin: `starve` opens /dev/null until the
open-file limit is reached (as a descriptor leak elsewhere in the daemon would), `feed` closes them again,
`health` prints the server's health as JSON. Ends when stdin closes.
"""

import json
import os
import resource
import sys

from npumon.outputs.exporter import ExporterView, build_registry
from npumon.outputs.web import WebServer


def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))  # quick to use up
    server = WebServer("127.0.0.1:0", build_registry(lambda: ExporterView(snapshot=None, findings=[])),
                       lambda: {}, lambda: (True, "ok"), client_timeout=0.5)
    server.start()
    print(server.port, flush=True)
    hoard = []
    for line in sys.stdin:
        command = line.strip()
        if command == "starve":
            try:
                while True:
                    hoard.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                pass
            print("starved", len(hoard), flush=True)
        elif command == "feed":
            while hoard:
                os.close(hoard.pop())
            print("fed", flush=True)
        elif command == "health":
            health = getattr(server, "health", lambda: (True, "n/a"))
            print(json.dumps(list(health())), flush=True)
    server.stop()


if __name__ == "__main__":
    main()
