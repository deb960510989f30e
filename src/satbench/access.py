"""How satbench reaches a remote server (--url): its API key and its one TLS policy.

The key comes from an environment variable (`api_key_env`), a file (`api_key_file`) or the
URL's password. It lives only in the Authorization header of requests to that lane's server;
config, run.json, logs and reports carry the variable's name or the file's path, never the key.

TLS: verification is on with the system's CAs, plus `ca_cert` when given; it is off only when
the user says `insecure` (a warning line, and run.json records it). Every connection to the
server (probe, sampler, request client, `satbench capability`) takes its SSL context from
`tls_context_for`.
"""

from __future__ import annotations

import os
import ssl
import urllib.request

from satbench.config import RunConfig, RuntimeConfig
from satbench.errors import RuntimeStartError, UserError
from satbench.runtimes.remote import redact_url
from satbench.transport import tls_context

TLS_HINT = "pass --ca-cert FILE (lane file: ca_cert) to trust its CA, or --insecure (insecure = true) to skip verification"


def _checked_key(key: str, where: str) -> str:
    """A key goes into an HTTP header verbatim: refuse anything that could break out of it."""
    if not key.isascii() or any(c.isspace() or not c.isprintable() for c in key):
        raise UserError(f"{where}: the API key contains whitespace or control characters")
    return key


def read_key_file(path: str) -> str:
    """The file's content stripped of surrounding whitespace; UserError naming the file (never its content)."""
    try:
        with open(path, encoding="utf-8") as fh:
            key = fh.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not readable as UTF-8 text"
        raise UserError(f"API key file {path}: {why}") from exc
    if not key:
        raise UserError(f"API key file {path} is empty")
    return _checked_key(key, f"API key file {path}")


def api_key(rc: RuntimeConfig, lane: str, url_secret: str | None = None) -> str | None:
    """The key for this lane's server: from api_key_env, api_key_file, else the URL's password."""
    if rc.api_key_env:
        key = os.environ.get(rc.api_key_env, "").strip()
        if not key:
            raise UserError(f"lane {lane}: environment variable {rc.api_key_env} (the API key) is empty or unset")
        return _checked_key(key, f"lane {lane}: environment variable {rc.api_key_env}")
    if rc.api_key_file:
        return read_key_file(rc.api_key_file)
    return url_secret or None


def auth_headers(rc: RuntimeConfig, lane: str, url_secret: str | None = None) -> dict[str, str]:
    key = api_key(rc, lane, url_secret)
    return {"Authorization": f"Bearer {key}"} if key else {}


def tls_context_for(rc: RuntimeConfig) -> ssl.SSLContext:
    """Verification on with the system CAs (+ ca_cert); off only with insecure."""
    ctx = tls_context(verify=not rc.insecure)
    if rc.ca_cert:
        try:
            ctx.load_verify_locations(cafile=rc.ca_cert)
        except ssl.SSLError as exc:  # an OSError too: test it first
            raise UserError(f"--ca-cert {rc.ca_cert}: not a PEM certificate ({exc.reason or exc})") from exc
        except OSError as exc:
            raise UserError(f"--ca-cert {rc.ca_cert}: {exc.strerror or exc}") from exc
    return ctx


def insecure_warning(rc: RuntimeConfig, url: str) -> str | None:
    return f"satbench: warning: TLS verification is OFF for {url} (--insecure)" if rc.insecure else None


def check_remote_access(cfg: RunConfig) -> list[str]:
    """Before anything starts: every url lane's key and CA file are readable. Returns warning lines."""
    warnings = []
    for lane in cfg.lanes:
        rc = lane.runtime
        if rc.kind != "url":
            continue
        api_key(rc, lane.name)
        tls_context_for(rc)
        line = insecure_warning(rc, redact_url(rc.url or ""))
        if line:
            warnings.append(line)
    return warnings


def tls_failure(url: str, exc: BaseException) -> RuntimeStartError:
    """One line naming the (credential-free) URL and why its certificate was refused."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or exc.reason or "unknown reason"
        return RuntimeStartError(f"{url}: certificate verify failed: {why}; {TLS_HINT}")
    return RuntimeStartError(f"{url}: TLS handshake failed: {getattr(exc, 'reason', None) or exc} "
                             "(is it an https server?)")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # the key would follow a redirect to any host
        return None


def get_bytes(url: str, headers: dict[str, str], tls: ssl.SSLContext, timeout_s: float) -> bytes:
    """One GET to the remote server: its TLS policy, no proxies, no redirects (urllib keeps the
    Authorization header across hosts)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=tls),
                                         _NoRedirect())
    with opener.open(urllib.request.Request(url, headers=headers), timeout=timeout_s) as resp:
        return resp.read()
