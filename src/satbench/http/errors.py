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
import ssl
import urllib.error

import aiohttp

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
