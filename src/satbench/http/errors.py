"""The one map from what a server or the network raises to what satbench records and says.

`NETWORK_ERRORS` is every exception a request to a server can raise through satbench's HTTP clients
(its own transport, aiohttp, urllib): OSError (sockets; ssl.SSLError; urllib's URLError and
HTTPError; TimeoutError, which asyncio.TimeoutError is), http.client.HTTPException (urllib reading a
malformed answer) and aiohttp.ClientError. satbench's own ParseError (an answer malformed, past its
size limit or its deadline) is not in it: a site that also takes those names ParseError beside it.

The texts: `describe` ('ClassName: message', what samples and probe failures record), `os_reason`
(the strerror of a failed connection), `failure_phrase` (an HTTP status or the error urllib wraps),
`tls_failure` / `unreachable` (the RuntimeStartError of a server that cannot be reached).
"""

from __future__ import annotations

import http.client
import os
import ssl
import urllib.error

import aiohttp

from satbench.config.limits import AnswerTimeoutError, AnswerTooLarge
from satbench.errors import RuntimeStartError

NETWORK_ERRORS = (OSError, http.client.HTTPException, aiohttp.ClientError)
# a pooled connection the server closed meanwhile (or reset when reused): an idempotent request is retried
STALE_CONNECTION = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)

TLS_HINT = ("pass --ca-cert FILE (lane file: ca_cert) to trust its CA, or --insecure (insecure = true) to "
            "skip verification")


def describe(exc: BaseException) -> str:
    """'ClassName: message', or the class name alone when the message is empty."""
    text = str(exc)
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


def os_reason(reason: object) -> str:
    """Why a connection failed: 'no answer (timed out)', an OSError's strerror, else its text."""
    if isinstance(reason, TimeoutError):
        return "no answer (timed out)"
    return (reason.strerror if isinstance(reason, OSError) and reason.strerror else None) or str(reason)


def failure_phrase(exc: BaseException) -> str:
    """One phrase for a failed request: 'HTTP 401 Unauthorized', or the socket/TLS error that urllib
    wraps in `.reason` (described)."""
    if code := getattr(exc, "code", None):
        return f"HTTP {code} {getattr(exc, 'reason', '')}".strip()
    inner = getattr(exc, "reason", None)
    return describe(inner if isinstance(inner, BaseException) else exc)


def status_phrase(status: int) -> str:
    """'HTTP 401 Unauthorized': the status and its standard phrase ('HTTP 599' for a status without one)."""
    try:
        return f"HTTP {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def tls_cause(exc: BaseException) -> BaseException | None:
    """The TLS error behind `exc` (aiohttp's ClientSSLError, urllib's URLError around an SSLError,
    an SSLError itself), else None."""
    if isinstance(exc, aiohttp.ClientSSLError):  # ClientConnectorCertificateError included
        return getattr(exc, "certificate_error", exc.os_error)
    if isinstance(exc, urllib.error.URLError):
        return exc.reason if isinstance(exc.reason, ssl.SSLError) else None
    return exc if isinstance(exc, ssl.SSLError) else None


def tls_failure(url: str, exc: BaseException) -> RuntimeStartError:
    """One line naming the (credential-free) URL and why its certificate was refused."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or exc.reason or "unknown reason"
        return RuntimeStartError(f"{url}: certificate verify failed: {why}; {TLS_HINT}")
    return RuntimeStartError(f"{url}: TLS handshake failed: {getattr(exc, 'reason', None) or exc} "
                             "(is it an https server?)")


def unreachable(url: str, exc: BaseException) -> RuntimeStartError:
    """A request to `url` (credential-free) got no HTTP answer: its TLS failure (tls_failure), else
    'cannot reach URL: reason' (os_reason of urllib's wrapped reason, or of `exc`)."""
    tls = tls_cause(exc)
    if tls is not None:
        return tls_failure(url, tls)
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return RuntimeStartError(f"cannot reach {url}: {os_reason(reason)}")


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


def _strerror(exc: OSError) -> str:
    """The system's phrase for a failed connection: asyncio's 'Connect call failed (...)' is told by
    its errno ('Connection refused'), a resolver's failure by its own text."""
    if isinstance(exc, TimeoutError):
        return "no answer (timed out)"
    if exc.errno and exc.errno > 0 and not isinstance(exc, ssl.SSLError):
        return os.strerror(exc.errno)
    return exc.strerror or str(exc) or exc.__class__.__name__


def tls_reason(exc: BaseException) -> str:
    """Why a TLS handshake failed, one line: the refused certificate and how to trust it, else the
    handshake's error (probably not an https server)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or exc.reason or "unknown reason"
        return f"certificate verify failed: {why}; {TLS_HINT}"
    return f"TLS handshake failed: {getattr(exc, 'reason', None) or exc} (is it an https server?)"


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
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientResponseError | http.client.HTTPException):
        return BadAnswer(url, str(exc) or exc.__class__.__name__, detail, stale)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return Unreachable(url, _strerror(exc.os_error), detail, stale)
    if isinstance(exc, OSError):
        return Unreachable(url, _strerror(exc), detail, stale)
    return Unreachable(url, str(exc) or exc.__class__.__name__, detail, stale)
