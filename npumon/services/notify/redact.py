"""Keeping receivers' secrets out of every text npumon stores or prints. Pure: no I/O.

A service that echoes a request (its URL, its `Authorization` header, its body) in an error answer
hands back the secrets in the forms npumon put them on the wire, not as configured. `secret_forms`
lists those forms for one configured value: the value itself, its URL-encodings (`quote`, `quote_plus`,
as DingTalk signs), for a URL its path, path segments, query values and `user:password` -- decoded,
and as the Base64 `requests` sends in `Authorization: Basic` -- and each of these JSON-escaped, as a
service that echoes inside JSON writes it. `Redactor` replaces every form by `<secret>`; `error_text`
redacts a service's answer or an error, then caps it at ERROR_TEXT_LIMIT_BYTES, so what reaches the
log, the outbox, the event history or a terminal is short and holds no secret. Redaction comes before
the cap: a cut through a token would leave a prefix no pattern knows.
"""

import base64
import json
import re
from typing import Iterable, List, Optional, Pattern, Set
from urllib.parse import parse_qsl, quote, quote_plus, unquote, unquote_plus, urlsplit

MASK = "<secret>"
# Bytes (UTF-8) of an answer or error text kept for the log, the outbox, the event history and
# `npumon notify test`: enough for any service's error code and message, too little to flood a log.
ERROR_TEXT_LIMIT_BYTES = 512
CUT_MARK = " [...]"
SHORTEST_REDACTED = 4  # shorter strings ("v2", "1") would mangle ordinary text, and give nothing away
_MIN_TOKEN_SEGMENT = 8  # path segments at least this long are tokens (Slack's T.../B.../...), not "api", "send"
_PERCENT_HEX = re.compile(r"%[0-9A-F]{2}")


def secret_forms(value: str) -> Set[str]:
    """Every form of one configured secret that npumon sends or a service may echo back."""
    base = {value}
    base.update(_url_secret_parts(value))
    forms: Set[str] = set()
    for part in base:
        forms.update(_encodings(part))
    return {form for form in forms if len(form) >= SHORTEST_REDACTED}


def basic_credentials(user: str, password: str) -> List[str]:
    """`Authorization: Basic` values for user:password: requests encodes Latin-1 where it can, else UTF-8."""
    pair = "{}:{}".format(user, password)
    encoded = []
    for charset in ("latin-1", "utf-8"):
        try:
            raw = pair.encode(charset)
        except UnicodeEncodeError:
            continue
        encoded.append(base64.b64encode(raw).decode("ascii"))
    return encoded


def _url_secret_parts(value: str) -> List[str]:
    """The parts of a URL where services put tokens: DingTalk and WeCom in the query, Slack and Feishu
    in the path, basic auth in the user:password. Not a URL: nothing."""
    if not value.startswith(("http://", "https://")):
        return []
    parts = urlsplit(value)
    found = [parts.path, parts.query] + [v for _, v in parse_qsl(parts.query, keep_blank_values=True)]
    found += [segment for segment in parts.path.split("/") if len(segment) >= _MIN_TOKEN_SEGMENT]
    if parts.password is not None:
        user, password = unquote(parts.username or ""), unquote(parts.password)
        found += [parts.password, password, "{}:{}".format(user, password)] + basic_credentials(user, password)
    elif parts.username:  # a token given as the user alone
        found.append(parts.username)
    return [part for part in found if part and part != "/"]


def _encodings(part: str) -> Set[str]:
    plain = {part, unquote(part), unquote_plus(part)}
    encoded = set(plain)
    for text in plain:
        encoded.update((quote(text, safe=""), quote(text), quote_plus(text)))
    # Percent-escapes echoed in lower case (%2f) are the same bytes.
    encoded.update({_PERCENT_HEX.sub(lambda m: m.group(0).lower(), text) for text in list(encoded)})
    escaped = set()
    for text in encoded:
        inside_json = json.dumps(text)[1:-1]
        escaped.update((inside_json, inside_json.replace("/", "\\/"), json.dumps(text, ensure_ascii=False)[1:-1],
                        _go_json_escaped(inside_json)))
    return encoded | escaped


def _go_json_escaped(text: str) -> str:
    """Go's encoding/json also escapes &, < and > (a URL's query, echoed by a Go service)."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


class Redactor:
    """Replaces every form of the given secrets (see `secret_forms`) by `<secret>` in any text."""

    def __init__(self, secrets: Iterable[str], _forms: Optional[Set[str]] = None):
        self._forms: Set[str] = set(_forms or ())
        for value in secrets:
            if value:
                self._forms.update(secret_forms(value))
        self._pattern = _alternation(self._forms)

    def extended(self, secrets: Iterable[str]) -> "Redactor":
        """A redactor for these secrets too: the values of one request (its signature, its header)."""
        return Redactor(secrets, self._forms)

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(MASK, text)


def _alternation(forms: Set[str]) -> Optional[Pattern[str]]:
    if not forms:
        return None
    # Longest first: the alternation takes the first that matches, so a URL is masked whole before its parts.
    ordered = sorted(forms, key=lambda form: (-len(form), form))
    return re.compile("|".join(re.escape(form) for form in ordered))


def cap_bytes(text: str, limit: int = ERROR_TEXT_LIMIT_BYTES) -> str:
    """`text` within `limit` bytes of UTF-8, cut at a character boundary and marked where it was cut."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    kept = encoded[:max(0, limit - len(CUT_MARK))].decode("utf-8", "ignore")
    return kept + CUT_MARK


def error_text(text: str, redact: Redactor, limit: int = ERROR_TEXT_LIMIT_BYTES) -> str:
    """An answer or error as it may be logged, stored and printed: redacted, on one line, capped."""
    return cap_bytes(" ".join(redact(text).split()), limit)
