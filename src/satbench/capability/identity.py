"""Which node a capability report speaks for, and where a router reaches its lanes: the node block.

A fleet merges one report per node, so each report names its node (`node_id`: --node-id, else the
hostname), the machine that wrote it (`hostname`, the addresses its interfaces hold) and, per lane,
the base URL a router should send that lane's requests to (`api_base`: --api-base, else a url lane's
own URL + /v1). `api_base_problems` says why an api_base does not name this machine; the fleet
merge refuses a report for it (fleet/merge).
"""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.parse

from pydantic import Field

from satbench.config.ranges import MAX_PORT
from satbench.config.schema import LaneConfig, Strict
from satbench.errors import UserError
from satbench.http.endpoint import is_loopback, openai_base, redact_url

NODE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,252}$"


class NodeBlock(Strict):
    """The node a capability report speaks for (capability schema 1.4)."""

    node_id: str = Field(pattern=NODE_ID_PATTERN,
                         description="the node's name for the router and the fleet: --node-id, else the "
                                     "hostname")
    hostname: str = Field(description="the hostname of the machine that wrote the report")
    addresses: list[str] = Field(default_factory=list,
                                 description="the non-loopback IPv4 and IPv6 addresses its interfaces hold, "
                                             "sorted")
    api_base: dict[str, str] = Field(
        default_factory=dict,
        description="lane → the base URL a router sends the lane's requests to (an OpenAI base URL, "
                    "usually ending in /v1)")
    ray_node_id: str | None = Field(None, description="the Ray node the report was written on (fleet run)")


def this_node(lanes: list[LaneConfig], node_id: str | None = None, api_base: list[str] | None = None,
              ray_node_id: str | None = None) -> NodeBlock:
    """This machine's node block: `api_base` holds `URL` (every lane) or `LANE=URL` items (--api-base,
    repeatable; a LANE=URL wins over a bare URL); a url lane without one gets its own URL + /v1."""
    from satbench.server.remote import interface_addresses

    hostname = socket.gethostname()
    addresses = sorted(a for a in interface_addresses() if not ipaddress.ip_address(a).is_loopback)
    names = [lane.name for lane in lanes]
    bases = parse_api_bases(api_base or [], names)
    for lane in lanes:
        if lane.name not in bases and lane.runtime.kind == "url" and lane.runtime.url:
            bases[lane.name] = openai_base(lane.runtime.url)
    nid = node_id or hostname
    if not re.match(NODE_ID_PATTERN, nid):
        raise UserError(f"--node-id {nid!r}: expected letters, digits and . _ : - (at most 253, starting "
                        "with a letter or digit)")
    return NodeBlock(node_id=nid, hostname=hostname, addresses=addresses, api_base=bases,
                     ray_node_id=ray_node_id)


def parse_api_bases(items: list[str], lanes: list[str]) -> dict[str, str]:
    """--api-base items → lane → URL. A bare URL applies to every lane; LANE=URL to one. A URL must be
    http(s) with a host and carry no user:password (the router's config is no place for a key)."""
    every: str | None = None
    out: dict[str, str] = {}
    for item in items:
        lane, sep, url = item.partition("=")
        if not sep or "://" in lane:
            lane, url = "", item
        elif lane not in lanes:
            raise UserError(f"--api-base {item}: no lane {lane!r} (lanes: {', '.join(lanes)})")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UserError(f"--api-base {redact_url(item)}: expected [LANE=]http(s)://HOST[:PORT][/PATH]")
        if "@" in parts.netloc:
            raise UserError(f"--api-base {redact_url(item)}: a URL with user:password; give the router "
                            "its key another way")
        if parts.query or parts.fragment or url.endswith(("?", "#")):
            raise UserError(f"--api-base {redact_url(item).split('?')[0].split('#')[0]}: a query string or "
                            "fragment would reach the router's config (a token in it would be published); "
                            "give the base URL alone")
        try:
            port = parts.port
        except ValueError:
            port = -1
        if port is not None and not 1 <= port <= MAX_PORT:
            raise UserError(f"--api-base {redact_url(item)}: the port must be from 1 to {MAX_PORT:,}")
        if lane:
            out[lane] = url
        else:
            every = url
    return {**({name: every for name in lanes} if every else {}), **out}


def api_base_problems(node: NodeBlock) -> list[str]:
    """Why the node's api_bases do not name the machine the report says wrote it, or cannot go into a
    router's config: no valid host and port, a query string, fragment or user:password (published
    with it), a loopback host (another machine's router cannot reach it), or a host that is neither
    the node id, the hostname (or its first label, or it with the first label of the id) nor one of
    the node's addresses."""
    names = {node.node_id.lower(), node.hostname.lower(), node.hostname.split(".")[0].lower()}
    own = set(node.addresses)
    out = []
    for lane, url in sorted(node.api_base.items()):
        try:
            parts = urllib.parse.urlsplit(url)
            host, _ = (parts.hostname or "").lower(), parts.port
        except ValueError:
            out.append(f"lane {lane}: api_base is not a URL with a valid host and port")
            continue
        if parts.query or parts.fragment or "@" in parts.netloc:
            out.append(f"lane {lane}: api_base carries a query string, fragment or user:password, which "
                       "the router's config would publish")
        elif is_loopback(url):
            out.append(f"lane {lane}: api_base {url} is loopback: a router on another machine cannot "
                       "reach it")
        elif host not in names and host.split(".")[0] not in names and _bare_ip(host) not in own:
            out.append(f"lane {lane}: api_base {url} names {host}, which is not this node ({node.node_id}, "
                       f"hostname {node.hostname}, addresses {', '.join(node.addresses) or 'none'})")
    return out


def _bare_ip(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return host
