"""Timed, announced stages and the two ways a probe ends early. Runs in the probe child (Python 3.7+)."""

import contextlib
import sys
import time

from .protocol import ACL_ERROR, STAGE_DONE, STAGE_START


class StageFailed(Exception):
    """The device failed the current stage. `code` is the ACL error code when there is one; `reason`
    says what kind of failure it was (protocol.ACL_ERROR, WRONG_DATA, ...)."""

    def __init__(self, message, code=None, reason=ACL_ERROR):
        super().__init__(message)
        self.code = code
        self.reason = reason


class Unavailable(Exception):
    """The probe cannot judge the device: no runtime, or a probe setting that does not fit."""


class Stages:
    """Runs the probe's stages in order: each is announced on `progress` before it starts (a hang can then
    be placed) and timed, also when it fails."""

    def __init__(self, progress=None):
        self.seconds = {}  # stage name -> seconds, in the order the stages ran
        self.current = None  # the stage running now, or the last one that ran
        self.failed = None  # the first stage that ended with an exception (cleanup runs after it)
        self._progress = progress if progress is not None else sys.stderr

    @contextlib.contextmanager
    def stage(self, name):
        self.current = name
        self._say(STAGE_START + name)
        started = time.monotonic()
        try:
            yield
        except BaseException:
            self.failed = self.failed or name
            raise
        finally:
            elapsed = time.monotonic() - started
            self.seconds[name] = round(elapsed, 6)
            self._say("{}{} {:.6f}".format(STAGE_DONE, name, elapsed))

    def shared(self, name, seconds):
        """A stage done once for several chips (the child's one acl.init): timed where it ran, recorded here
        too, not announced again."""
        self.current = name
        self.seconds[name] = seconds

    def _say(self, line):
        self._progress.write(line + "\n")
        self._progress.flush()
