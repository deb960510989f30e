"""URL runtime: a server someone else runs. Nothing to start or stop; credentials never leave here.
The URL helpers (split_credentials, redact_url, is_loopback) are http.endpoint's."""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse

from satbench.http.endpoint import is_loopback, resolved_addresses, split_credentials
from satbench.server.base import Runtime


def served_here(url: str) -> bool:
    """The URL's host is this machine: a loopback name or address, or an address one of its
    interfaces holds (psutil's list; not a test bind, which succeeds for any address on a host that
    allows non-local binds, as VIP hosts do). False when the name does not resolve."""
    if is_loopback(url):
        return True
    resolved = resolved_addresses(url)
    return bool(resolved) and all(_local(a) for a in resolved)


def listening_pid(url: str) -> int | None:
    """The process listening on the URL's TCP port on this machine (call it only for a URL that
    `served_here`): what the sampler reads a running server's CPU and RSS from, so that its CPU is the
    server's and not another process's. None when no single other process listens there, or the
    system does not say (psutil needs the right to read other users' sockets)."""
    import os

    import psutil

    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        pids = {c.pid for c in psutil.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    except (psutil.Error, OSError, ValueError):
        return None
    pids.discard(os.getpid())  # a server inside satbench's own process (a test's) is not another one
    return pids.pop() if len(pids) == 1 else None


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
