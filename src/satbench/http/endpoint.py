"""A server's address as one value: `Endpoint` (base URL, request headers, TLS policy) and URL helpers.

An Endpoint's base URL is credential-free (a URL's user:password is split off by
`split_credentials` before one is built; the password becomes the Authorization header), so its
text may go into messages, logs and run.json. Its headers (the API key) never appear in its repr.
"""

from __future__ import annotations

import socket
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from satbench.errors import UserError


def tls_context(verify: bool) -> ssl.SSLContext:
    """The system CAs with hostname checking; neither with `verify` False."""
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


@dataclass(frozen=True)
class Endpoint:
    """One server: `base_url` (http(s)://host[:port][/prefix], no trailing '/', no credentials),
    `header_items` (sent with every request: the Authorization key, if any) and `tls` (the lane's
    TLS policy, access.tls_context_for; None: verify against the system's CAs). Immutable."""

    base_url: str
    header_items: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    tls: ssl.SSLContext | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, url: str, headers: Mapping[str, str] | None = None,
           tls: ssl.SSLContext | None = None) -> Endpoint:
        """The endpoint of a credential-free `url` (a trailing '/' dropped)."""
        return cls(url.rstrip("/"), tuple((headers or {}).items()), tls)

    @property
    def headers(self) -> dict[str, str]:
        """A fresh copy of the request headers."""
        return dict(self.header_items)

    @property
    def has_key(self) -> bool:
        """An Authorization header (an API key) goes with every request."""
        return any(k.lower() == "authorization" for k, _ in self.header_items)

    def url(self, path: str = "") -> str:
        """base_url + path ('/props' → 'http://host:port/props')."""
        return self.base_url + path

    @cached_property
    def parts(self) -> urllib.parse.SplitResult:
        return urllib.parse.urlsplit(self.base_url)

    @property
    def is_https(self) -> bool:
        return self.parts.scheme == "https"

    @property
    def host(self) -> str | None:
        return self.parts.hostname

    @property
    def port(self) -> int:
        """The URL's port, else the scheme's (443 for https, 80 for http)."""
        return self.parts.port or (443 if self.is_https else 80)

    @cached_property
    def ssl_context(self) -> ssl.SSLContext | None:
        """What an https connection uses (`tls`, else the system CAs, made once); None for http."""
        if not self.is_https:
            return None
        return self.tls or tls_context(verify=True)

    @property
    def redacted(self) -> str:
        """The base URL with any user:password hidden (it has none when built from split_credentials)."""
        return redact_url(self.base_url)

    def __str__(self) -> str:
        return self.redacted


OPENAI_SUFFIX = "/v1"
PATHS_USED = ("/completion, /v1/completions or /v1/chat/completions, /props, /slots, /metrics, /health, "
              "/tokenize, /detokenize, /v1/models")


def split_credentials(url: str) -> tuple[str, str | None]:
    """(the server's root URL without user:password, the password or None): http(s)://host[:port][/prefix].
    An OpenAI base URL (a prefix ending in /v1, as LiteLLM and OpenAI clients write it) names the same
    server: the /v1 is dropped, as satbench adds its paths (PATHS_USED) to the root itself. A query
    or a fragment is refused; text urllib cannot split (an unclosed IPv6 bracket) is refused naming
    the reason."""
    try:
        parsed = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise UserError(f"--url {redact_url(url)}: not a valid URL ({exc})") from exc
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UserError(f"--url {redact_url(url)}: expected http://HOST:PORT or https://HOST:PORT")
    try:
        port = parsed.port
    except ValueError as exc:
        raise UserError(f"--url {redact_url(url)}: the port is not a number from 0 to 65535") from exc
    host = parsed.hostname if ":" not in parsed.hostname else f"[{parsed.hostname}]"
    netloc = host + (f":{port}" if port else "")
    path = parsed.path.rstrip("/")  # a prefix stays: a server behind a proxy at https://gw/llm
    if path.lower().endswith(OPENAI_SUFFIX):
        path = path[: -len(OPENAI_SUFFIX)].rstrip("/")
    clean = urllib.parse.urlunsplit((parsed.scheme, netloc, path, "", ""))
    if parsed.query or parsed.fragment:
        raise UserError(f"--url {redact_url(url)}: give the server's URL ({clean} or {clean}{OPENAI_SUFFIX}) "
                        f"without a query or a fragment: satbench adds the paths it uses ({PATHS_USED})")
    return clean, parsed.password


def openai_base(url: str) -> str:
    """The OpenAI base URL of the server `url` names (its root + /v1), without credentials: what a
    router is given."""
    return split_credentials(url)[0] + OPENAI_SUFFIX


def redact_url(url: str) -> str:
    """The URL with any user:password replaced by ***. Any text is accepted (the CLI passes every
    argument through): text urllib cannot split keeps everything before its last '@' hidden too."""
    try:
        parsed = urllib.parse.urlsplit(url)
    except ValueError:
        if "@" not in url:
            return url
        head, _, tail = url.rpartition("@")
        scheme = head[: head.index("://") + 3] if "://" in head else ""
        return f"{scheme}***@{tail}"
    if "@" not in parsed.netloc:
        return url
    return urllib.parse.urlunsplit((parsed.scheme, "***@" + parsed.netloc.rsplit("@", 1)[1],
                                    parsed.path, parsed.query, parsed.fragment))


def resolved_addresses(url: str) -> set[str]:
    """The addresses the URL's host resolves to (getaddrinfo); none when it does not resolve or the
    text is not a URL."""
    try:
        host = urllib.parse.urlsplit(url).hostname
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError, ValueError):
        return set()


def is_loopback(url: str) -> bool:
    """The URL names this machine by a loopback name or address; False for text that is not a URL."""
    try:
        host = urllib.parse.urlsplit(url).hostname or ""
    except ValueError:
        return False
    return host in ("localhost", "::1") or host.startswith("127.")
