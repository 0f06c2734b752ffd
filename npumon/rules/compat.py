"""Do the installed driver and firmware fit together? The judgement behind the versions-incompatible rule.

The host source reads the version files (sources/host/parse.py); this module compares what they say.
"""

import re
from typing import List, Optional, Tuple

from ..model import HostSample
from ..sources.host.parse import _RANGES_TEXT, HostParseError

# Version comparison. Each dot-separated part becomes (rank, number): a plain number n is (1, n)
# and a release candidate rcN (any case) is (0, N), so at one position every rc sorts before every
# release: 23.0.rc3 < 23.0.0 < 23.0.7 and 24.1.rc2 < 24.1.rc2.2 < 24.1.rc3 < 24.1.0. Other parts,
# such as the T63 of test builds, have no known order and make the version uncomparable.
VersionKey = Tuple[Tuple[int, int], ...]
_RELEASE_ZERO = (1, 0)


def parse_version(text: str) -> VersionKey:
    """'24.1.rc2.2' -> ((1, 24), (1, 1), (0, 2), (1, 2))."""
    parts = []
    for part in text.strip().split("."):
        rc = re.match(r"^rc(\d+)$", part, re.IGNORECASE)
        if part.isdigit():
            parts.append((1, int(part)))
        elif rc:
            parts.append((0, int(rc.group(1))))
        else:
            raise HostParseError("cannot compare version {!r} (part {!r})".format(text, part))
    return tuple(parts)


def _leading(key: VersionKey, length: int) -> VersionKey:
    """The first `length` parts of a version, missing parts counted as 0."""
    return key[:length] + (_RELEASE_ZERO,) * (length - len(key))


def _parse_bound(text: str) -> VersionKey:
    # A high bound ending in '.' leaves its last listed part open: "23.0.0." admits every 23.0.x and
    # "24.1." every 24.x. This reading is inferred from real files, where firmware of package 23.0.7
    # lists [23.0.0,23.0.0.] beside driver 23.0.7, and 24.1.rc3 / 25.0.rc1.1 firmware list
    # [24.1,24.1.] / [25.0,25.0.] beside drivers 24.1.rc3 / 25.0.rc1.1.
    text = text.strip()
    if text.endswith("."):
        return parse_version(text[:-1])[:-1]
    return parse_version(text)


def parse_ranges(text: str) -> List[Tuple[VersionKey, VersionKey]]:
    """'[7.0.0,7.2.99],[6.4.0,6.4.99]' -> [(low, high), ...]; '[x]' alone means [x,x]."""
    if not _RANGES_TEXT.match(text.strip()):
        raise HostParseError("not a list of [low,high] ranges: {!r}".format(text))
    ranges = []
    for body in re.findall(r"\[([^\[\]]+)\]", text):
        bounds = body.split(",")
        if len(bounds) > 2:
            raise HostParseError("range [{}] has more than two bounds".format(body))
        ranges.append((parse_version(bounds[0].rstrip(".")), _parse_bound(bounds[-1])))
    return ranges


def version_in_ranges(version: str, ranges: str) -> bool:
    """Whether `version` lies in any of the bracketed ranges.

    Each bound is compared over as many parts as it lists, so [7.0.0,7.2.99] holds 7.1.0.11.220 and
    7.2.99.5; see _parse_bound for bounds ending in '.'. Raises HostParseError when a version or a
    range cannot be compared.
    """
    key = parse_version(version)
    return any(
        _leading(key, len(low)) >= low and _leading(key, len(high)) <= high
        for low, high in parse_ranges(ranges)
    )


def check_versions(host: HostSample) -> Tuple[Optional[bool], str]:
    """Are the installed driver and firmware compatible with each other?

    Both directions are checked: the firmware version against the driver's compatible_version_fw and
    the driver version against the firmware's compatible_version_drv. False when either says no,
    True when at least one says yes and none says no, None when neither can be checked; the text
    says which ranges were used and what could not be checked.
    """
    directions = (
        ("firmware", host.firmware_version, "driver", host.driver_compatible_firmware),
        ("driver", host.driver_version, "firmware", host.firmware_compatible_driver),
    )
    inside, outside, unknown = [], [], []
    for subject, version, lister, ranges in directions:
        if version is None:
            unknown.append("{} version unknown".format(subject))
            continue
        if ranges is None:
            unknown.append("the {} lists no compatible {} versions".format(lister, subject))
            continue
        try:
            holds = version_in_ranges(version, ranges)
        except HostParseError as exc:
            unknown.append(str(exc))
            continue
        verdict = "{} {} is {} the {}'s compatible range {}".format(
            subject, version, "within" if holds else "outside", lister, ranges)
        (inside if holds else outside).append(verdict)
    if outside:
        return False, "; ".join(outside)
    if inside:
        return True, "; ".join(inside + ["not checked: " + reason for reason in unknown])
    return None, "cannot tell: " + "; ".join(unknown)


