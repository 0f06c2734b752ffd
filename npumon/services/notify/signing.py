"""The signatures chat robots check. Pure functions of (secret, timestamp); the tests recompute them
independently.

DingTalk: key = secret, message = "<timestamp ms>\\n<secret>", HMAC-SHA256, Base64, then URL-encoded into
the query next to the timestamp.
Feishu/Lark: key = "<timestamp s>\\n<secret>", empty message, HMAC-SHA256, Base64, sent inside the JSON
body. (Copying DingTalk's scheme to Feishu is a classic mistake: the server answers 19021.)
"""

import base64
import hashlib
import hmac
from typing import Dict


def dingtalk_query(secret: str, now: float) -> Dict[str, str]:
    timestamp = str(int(now * 1000))
    digest = hmac.new(secret.encode("utf-8"), "{}\n{}".format(timestamp, secret).encode("utf-8"),
                      hashlib.sha256).digest()
    # urlencode() quotes the Base64 text the way DingTalk's own sample does (quote_plus).
    return {"timestamp": timestamp, "sign": base64.b64encode(digest).decode("ascii")}


def feishu_fields(secret: str, now: float) -> Dict[str, str]:
    timestamp = str(int(now))
    digest = hmac.new("{}\n{}".format(timestamp, secret).encode("utf-8"), b"", hashlib.sha256).digest()
    return {"timestamp": timestamp, "sign": base64.b64encode(digest).decode("ascii")}
