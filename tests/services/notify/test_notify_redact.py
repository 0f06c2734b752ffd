"""Redaction of every form a secret travels in, the cap on kept answers, bearer tokens, and answers read
bounded -- the redactor as a pure function, and receivers against real servers on 127.0.0.1."""

import base64
import socket
import threading
import time
from urllib.parse import quote, quote_plus

import pytest

from npumon.services.notify.config import ReceiverConfig
from npumon.services.notify.redact import ERROR_TEXT_LIMIT_BYTES, MASK, Redactor, cap_bytes, error_text, secret_forms
from npumon.services.notify.secrets import SecretError, resolve_secrets
from recording_server import RecordingServer
from test_notify_receivers import HOST, NOW, alert, receiver

TOKEN = "t0ken/with+plus=and-more-42"
BASIC_URL = "https://ops:S3cr%2Ft%2Bpw%3D@hooks.example/npumon"  # password S3cr/t+pw=


def test_every_form_of_a_secret_is_masked():
    redact = Redactor([TOKEN, BASIC_URL])
    basic = base64.b64encode(b"ops:S3cr/t+pw=").decode()
    for form in (TOKEN, quote(TOKEN, safe=""), quote(TOKEN, safe="").lower(), quote_plus(TOKEN), quote(TOKEN),
                 TOKEN.replace("/", "\\/"), "Bearer " + TOKEN, basic, "S3cr/t+pw=", "S3cr%2Ft%2Bpw%3D",
                 "ops:S3cr/t+pw=", BASIC_URL):
        masked = redact("before {} after".format(form))
        assert masked.startswith("before ") and masked.endswith(" after") and MASK in masked, form
        assert "S3cr" not in masked and "t0ken" not in masked and basic not in masked, (form, masked)


def test_a_url_is_masked_whole_first_and_its_token_parts_alone():
    url = "https://oapi.dingtalk.com/robot/send?access_token=abcdef0123456789&x=1"
    redact = Redactor([url])
    assert redact("POST {} failed".format(url)) == "POST <secret> failed"
    assert redact("token abcdef0123456789 echoed") == "token <secret> echoed"
    # Go's encoding/json escapes & in an echoed URL
    assert "abcdef0123456789" not in redact(url.replace("&", "\\u0026"))
    assert "api" in redact("the api said no")  # short words are not masked


def test_secret_forms_of_basic_auth_include_what_requests_sends():
    forms = secret_forms("http://user:p%C3%A4ss@host/x")  # pässword: Latin-1 on the wire, as requests does
    assert base64.b64encode("user:päss".encode("latin-1")).decode() in forms
    assert base64.b64encode("user:päss".encode("utf-8")).decode() in forms
    assert "päss" in forms and "p%C3%A4ss" in forms


def test_cap_keeps_whole_characters_within_the_limit():
    text = "错" * 1000
    capped = cap_bytes(text)
    assert len(capped.encode("utf-8")) <= ERROR_TEXT_LIMIT_BYTES and capped.endswith(" [...]")
    assert capped[:-6] == "错" * len(capped[:-6])
    assert cap_bytes("short") == "short"


def test_redaction_comes_before_the_cap():
    redact = Redactor([TOKEN])
    text = "x" * (ERROR_TEXT_LIMIT_BYTES - 10) + TOKEN
    kept = error_text(text, redact)
    assert TOKEN[:8] not in kept and len(kept.encode("utf-8")) <= ERROR_TEXT_LIMIT_BYTES


def test_an_echoed_token_cut_by_the_cap_leaves_no_part_of_itself():
    token = "cutt0ken-0123456789abcdef"
    echo = "a" * 490 + token  # on its own the cut would fall inside the token
    with RecordingServer(lambda request: (500, {}, echo.encode())) as server:
        answer = receiver("webhook", server.url("/hook?token=" + token)).send([alert()], HOST, NOW, None)
    assert answer.outcome == "retry"
    assert token[:6] not in answer.detail and len(answer.detail.encode("utf-8")) <= ERROR_TEXT_LIMIT_BYTES


def test_the_kept_answer_is_capped_in_bytes():
    with RecordingServer(lambda request: (400, {}, ("错误" * 2000).encode("utf-8"))) as server:
        answer = receiver("webhook", server.url("/hook")).send([alert()], HOST, NOW, None)
    assert answer.outcome == "failed" and answer.detail.startswith("HTTP 400: 错误")
    assert len(answer.detail.encode("utf-8")) <= ERROR_TEXT_LIMIT_BYTES


@pytest.mark.parametrize("kind", ["webhook", "alertmanager"])
def test_a_bearer_token_is_sent_and_masked_in_the_answer(kind):
    def echo(request):
        return 401, {}, "denied for {}".format(request.headers.get("Authorization")).encode()

    with RecordingServer(echo) as server:
        answer = receiver(kind, server.url("/"), bearer_token=TOKEN).send([alert()], HOST, NOW, None)
        (request,) = server.requests
    assert request.headers["Authorization"] == "Bearer " + TOKEN
    assert answer.outcome == "failed" and answer.detail == "HTTP 401: denied for <secret>"


def test_bearer_token_mistakes_are_one_line_errors(tmp_path):
    with pytest.raises(SecretError, match=r"bearer_token: receiver 'b': a bearer token is one word"):
        resolve_secrets(ReceiverConfig(name="b", type="webhook", url="http://h/x", bearer_token="two words"),
                        0, "<test>")
    token_file = tmp_path / "token"
    token_file.write_text("tok\n")
    with pytest.raises(SecretError, match=r"bearer_token_file: receiver 'b': give either a bearer token or "
                                          r"user:password in the URL, not both"):
        resolve_secrets(ReceiverConfig(name="b", type="webhook", url="http://u:p@h/x",
                                       bearer_token_file=str(token_file)), 0, "<test>")
    assert resolve_secrets(ReceiverConfig(name="b", type="alertmanager", url="http://h",
                                          bearer_token_file=str(token_file)), 0, "<test>")["bearer_token"] == "tok"


class _EndlessAnswer:
    """A server that answers 500 with a 200 MiB Content-Length, sends 1 MiB of it and then stalls."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        connection, _ = self.listener.accept()
        with connection:
            connection.settimeout(5)
            received = b""
            while b"\r\n\r\n" not in received:
                received += connection.recv(65536)
            head = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 209715200\r\n\r\n"
            try:
                connection.sendall(head + b"x" * (1024 * 1024))
            except OSError:
                pass  # the client stopped reading and went: what it should do
            self.done.wait(10)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(5)
        self.listener.close()


def test_a_huge_answer_is_read_only_in_part_and_does_not_wait_for_the_rest():
    with _EndlessAnswer() as server:
        started = time.monotonic()
        answer = receiver("webhook", "http://127.0.0.1:{}/hook".format(server.port), timeout_seconds=3).send(
            [alert()], HOST, NOW, None)
        took = time.monotonic() - started
    assert (answer.outcome, answer.status) == ("retry", 500)  # the answer's status, not a timeout
    assert answer.detail.startswith("HTTP 500: xxxx") and answer.detail.endswith(" [...]")
    assert took < 2.5
