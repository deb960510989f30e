"""The one map from what a server or the network raises to what satbench records and says.

Outside http/, a failed request is a `RequestFailed` (url, reason, detail): `Unreachable`,
`TimedOut`, `TooLarge`, `TlsRefused` or `BadAnswer`. `request_failed` makes one from what a request
raised, once, at access.read's boundary; no module outside http/ names an aiohttp or socket error.

`NETWORK_ERRORS` is what a request can raise inside http/ (OSError: sockets, ssl.SSLError,
TimeoutError; aiohttp.ClientError). satbench's own ParseError (an answer malformed, past its size
limit or its deadline) is not in it. The texts: `describe` ('ClassName: message', what samples
record: a RequestFailed's `detail`), `status_phrase` ('HTTP 401 Unauthorized'), `tls_reason`.
"""

from __future__ import annotations

import http
import json
import os
import ssl

import aiohttp

from satbench.config.limits import AnswerTimeoutError, AnswerTooLarge

NETWORK_ERRORS = (OSError, aiohttp.ClientError)
# a pooled connection the server closed meanwhile (or reset when reused): RequestFailed.stale
STALE_CONNECTION = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)

TLS_HINT = ("pass --ca-cert FILE (lane file: ca_cert) to trust its CA, or --insecure (insecure = true) to "
            "skip verification")


def describe(exc: BaseException) -> str:
    """'ClassName: message', or the class name alone when the message is empty."""
    text = str(exc)
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


class RequestFailed(Exception):
    """A request got no usable HTTP answer. `url`: the URL asked (credential-free); `reason`: one line
    saying why; `detail`: what the HTTP stack or a limit raised, described ('ClassName: message'), the
    text a sample records; `stale`: a pooled connection the server had closed (or reset when reused),
    so that an idempotent request may be sent once more on a new one. str(): 'URL: reason'."""

    def __init__(self, url: str, reason: str, detail: str | None = None, stale: bool = False) -> None:
        super().__init__(f"{url}: {reason}")
        self.url, self.reason, self.stale = url, reason, stale
        self.detail = detail if detail is not None else describe(self)


class Unreachable(RequestFailed):
    """No connection, or it broke before the answer: refused, no route, a name that does not resolve,
    a reset, closed by the server. `reason` is the system's phrase ('Connection refused')."""


class TimedOut(RequestFailed):
    """The whole exchange (connect, head, body) did not end within its deadline."""


class TooLarge(RequestFailed):
    """The answer's body was larger than its limit (read up to the limit + 1 byte, no further)."""


class TlsRefused(RequestFailed):
    """The TLS handshake failed: the certificate was refused (`reason` says why and how to trust it),
    or the server does not speak TLS."""


class BadAnswer(RequestFailed):
    """The server answered something that is not a whole HTTP answer (a malformed head or body)."""


def status_phrase(status: int) -> str:
    """'HTTP 401 Unauthorized': the status and its standard phrase ('HTTP 599' for a status without one)."""
    try:
        return f"HTTP {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def tls_cause(exc: BaseException) -> BaseException | None:
    """The TLS error behind `exc` (aiohttp's ClientSSLError, an SSLError itself), else None."""
    if isinstance(exc, aiohttp.ClientSSLError):  # ClientConnectorCertificateError included
        return getattr(exc, "certificate_error", exc.os_error)
    return exc if isinstance(exc, ssl.SSLError) else None


def tls_reason(exc: BaseException) -> str:
    """Why a TLS handshake failed, one line: the refused certificate and how to trust it, else the
    handshake's error (probably not an https server)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or exc.reason or "unknown reason"
        return f"certificate verify failed: {why}; {TLS_HINT}"
    return f"TLS handshake failed: {getattr(exc, 'reason', None) or exc} (is it an https server?)"


def _strerror(exc: OSError) -> str:
    """The system's phrase for a failed connection: asyncio's 'Connect call failed (...)' is told by
    its errno ('Connection refused'), a resolver's failure by its own text."""
    if isinstance(exc, TimeoutError):
        return "no answer (timed out)"
    if exc.errno and exc.errno > 0 and not isinstance(exc, ssl.SSLError):
        return os.strerror(exc.errno)
    return exc.strerror or str(exc) or exc.__class__.__name__


def request_failed(url: str, exc: BaseException) -> RequestFailed:
    """The one map from what a request raised (a limit's ParseError, aiohttp, the socket, TLS) to
    satbench's RequestFailed; `url` is credential-free. Its `detail` is describe(exc)."""
    detail = describe(exc)
    stale = isinstance(exc, STALE_CONNECTION)
    if isinstance(exc, AnswerTooLarge | AnswerTimeoutError):  # their message is 'URL: reason'
        kind: type[RequestFailed] = TooLarge if isinstance(exc, AnswerTooLarge) else TimedOut
        return kind(url, str(exc).removeprefix(f"{url}: "), detail)
    tls = tls_cause(exc)
    if tls is not None:
        return TlsRefused(url, tls_reason(tls), detail)
    if isinstance(exc, TimeoutError):
        return TimedOut(url, "no answer (timed out)", detail)
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        return BadAnswer(url, str(exc) or exc.__class__.__name__, detail, stale)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return Unreachable(url, _strerror(exc.os_error), detail, stale)
    if isinstance(exc, OSError):
        return Unreachable(url, _strerror(exc), detail, stale)
    return Unreachable(url, str(exc) or exc.__class__.__name__, detail, stale)


def error_body_message(text: str) -> str:
    """The `error.message` of a JSON error body, else the body itself (first line)."""
    try:
        obj = json.loads(text)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    except (ValueError, RecursionError):
        pass
    return text.strip().splitlines()[0][:300] if text.strip() else "(empty body)"
