"""URL runtime: a server someone else runs. Nothing to start or stop; credentials never leave here."""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse

from satbench.errors import UserError
from satbench.server.base import Runtime


def split_credentials(url: str) -> tuple[str, str | None]:
    """(URL without user:password, the password or None): http(s)://host[:port][/prefix], where a
    prefix ending in /v1 (an OpenAI base URL, not the server's root), a query or a fragment is refused;
    text urllib cannot split (an unclosed IPv6 bracket) is refused naming the reason."""
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
    clean = urllib.parse.urlunsplit((parsed.scheme, netloc, path, "", ""))
    if path.lower().endswith("/v1") or parsed.query or parsed.fragment:  # /v1 would become /v1/v1/models
        root = urllib.parse.urlunsplit((parsed.scheme, netloc, path[:-3] if path.lower().endswith("/v1") else path,
                                        "", ""))
        raise UserError(f"--url {redact_url(url)}: give the server's root URL ({root}), without /v1, a query or "
                        "a fragment: satbench adds /v1/chat/completions, /props, /metrics itself")
    return clean, parsed.password


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


def is_loopback(url: str) -> bool:
    """The URL names this machine by a loopback name or address; False for text that is not a URL."""
    try:
        host = urllib.parse.urlsplit(url).hostname or ""
    except ValueError:
        return False
    return host in ("localhost", "::1") or host.startswith("127.")


def served_here(url: str) -> bool:
    """The URL's host is this machine: a loopback name or address, or an address one of its
    interfaces holds (psutil's list; not a test bind, which succeeds for any address on a host that
    allows non-local binds, as VIP hosts do). False when the name does not resolve."""
    if is_loopback(url):
        return True
    try:
        host = urllib.parse.urlsplit(url).hostname
        resolved = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError, ValueError):
        return False
    return bool(resolved) and all(_local(a) for a in resolved)


def _local(address: str) -> bool:
    """An address that reaches this machine: loopback, unspecified (0.0.0.0 and :: connect here, and
    llama-server prints them as where it listens), or one its interfaces hold (IPv4-mapped IPv6
    read as its IPv4)."""
    try:
        ip = ipaddress.ip_address(_bare(address))
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified or str(ip) in interface_addresses()


def _bare(address: str) -> str:
    """An IP address without an IPv6 zone ('fe80::1%eth0' → 'fe80::1')."""
    return address.split("%", 1)[0]


def interface_addresses() -> set[str]:
    """Every IPv4 and IPv6 address this machine's interfaces hold."""
    import psutil

    return {_bare(a.address) for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)}


class UrlRuntime(Runtime):
    kind = "url"

    def __init__(self, url: str) -> None:
        super().__init__()
        self.base_url, self.url_password = split_credentials(url)

    def name_and_version(self) -> tuple[str, str | None]:
        return "running server (given by --url)", None

    def start(self) -> None:
        """Nothing to start; reachability is checked by the probe."""

    def stop(self) -> None:
        """Not ours to stop."""
