"""Which node a capability report speaks for, and where a router reaches its lanes: the node block.

A fleet merges one report per node, so each report names its node (`node_id`: --node-id, else the
hostname), the machine that wrote it (`hostname`, the addresses its interfaces hold) and, per lane,
the base URL a router should send that lane's requests to (`api_base`: --api-base, else a url lane's
own URL + /v1).

Every api_base holds to one form (`api_base_problem`), checked wherever one is taken or read:
`--api-base`, a url lane's own URL, and a NodeBlock made or read back (so `fleet merge` meets the
rule `capability` wrote by). The fleet adds rules of its own (`api_base_problems`): a loopback host,
which `capability` writes for a router on the node itself, is refused there, since a fleet's router
runs on another machine; and the host must name the node.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import unicodedata
import urllib.parse
from typing import Annotated

from pydantic import Field, field_validator

from satbench.config.ranges import MAX_PORT, shown
from satbench.config.schema import LANE_NAME_PATTERN, LaneConfig, Strict
from satbench.errors import UserError
from satbench.http.endpoint import is_loopback, openai_base, redact_url

NODE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,252}$"
LaneName = Annotated[str, Field(pattern=LANE_NAME_PATTERN)]  # satbench's lane-name rule, as a report holds it
MAX_API_BASE_CHARS = 2048
# HOST[:PORT] of an api_base: an ASCII name (IDN as punycode) or a bracketed IPv6 address; ASCII digits
_NETLOC = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::([0-9]{1,5}))?")


class NodeBlock(Strict):
    """The node a capability report speaks for (capability schema 1.4)."""

    node_id: str = Field(pattern=NODE_ID_PATTERN,
                         description="the node's name for the router and the fleet: --node-id, else the "
                                     "hostname")
    hostname: str = Field(description="the hostname of the machine that wrote the report")
    addresses: list[str] = Field(default_factory=list,
                                 description="the non-loopback IPv4 and IPv6 addresses its interfaces hold, "
                                             "sorted")
    api_base: dict[LaneName, str] = Field(
        default_factory=dict,
        description="lane → the base URL a router sends the lane's requests to (an OpenAI base URL, "
                    "usually ending in /v1)")
    ray_node_id: str | None = Field(None, description="the Ray node the report was written on (fleet run)")

    @field_validator("addresses")
    @classmethod
    def _each_an_address(cls, addresses: list[str]) -> list[str]:
        """Every address is an IPv4 or IPv6 address."""
        for a in addresses:
            try:
                ipaddress.ip_address(a)
            except ValueError:
                raise ValueError(f"not an IP address: {shown(a)}") from None
        return addresses

    @field_validator("api_base")
    @classmethod
    def _each_in_form(cls, bases: dict[str, str]) -> dict[str, str]:
        """Every api_base holds to api_base_problem's form."""
        for lane, url in sorted(bases.items()):
            if (problem := api_base_problem(url)) is not None:
                raise ValueError(f"lane {lane}: api_base {shown_base(url)}: {problem}")
        return bases


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
        if lane.name not in bases and (url := lane.runtime.remote_url):
            own = openai_base(url)
            if (problem := api_base_problem(own)) is not None:
                raise UserError(f"lane {lane.name}: its url gives the api_base {shown_base(own)}: {problem}; "
                                f"give it with --api-base {lane.name}=URL")
            bases[lane.name] = own
    nid = node_id or hostname
    if not re.match(NODE_ID_PATTERN, nid):
        raise UserError(f"--node-id {nid!r}: expected letters, digits and . _ : - (at most 253, starting "
                        "with a letter or digit)")
    return NodeBlock(node_id=nid, hostname=hostname, addresses=addresses, api_base=bases,
                     ray_node_id=ray_node_id)


def parse_api_bases(items: list[str], lanes: list[str]) -> dict[str, str]:
    """--api-base items → lane → URL. A bare URL applies to every lane; LANE=URL to one. Each URL
    holds to api_base_problem's form, else a UserError (one line, the value quoted)."""
    every: str | None = None
    out: dict[str, str] = {}
    for item in items:
        lane, sep, url = item.partition("=")
        if not sep or "://" in lane:
            lane, url = "", item
        elif lane not in lanes:
            raise UserError(f"--api-base {shown_base(item)}: no lane {lane!r} (lanes: {', '.join(lanes)})")
        if (problem := api_base_problem(url)) is not None:
            raise UserError(f"--api-base {shown_base(item)}: {problem}")
        if lane:
            out[lane] = url
        else:
            every = url
    return {**({name: every for name in lanes} if every else {}), **out}


def api_base_problem(url: str) -> str | None:
    """Why `url` cannot be a lane's api_base in a router's config, or None: the one form of every
    api_base. It is taken as written (nothing trimmed): http(s)://HOST[:PORT][/PATH], at most
    MAX_API_BASE_CHARS characters, no whitespace, control or format character anywhere, HOST an
    ASCII name or a bracketed IPv6 address, PORT ASCII digits from 1 to MAX_PORT, and no user:password,
    query string or fragment, not even an empty `?` or `#` (the router's config would publish them)."""
    if len(url) > MAX_API_BASE_CHARS:
        return f"longer than {MAX_API_BASE_CHARS:,} characters"
    if any(c.isspace() or unicodedata.category(c).startswith("C") for c in url):
        return "holds whitespace or a control character, which would reach the router's config as written"
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "not a URL with a valid host and port"
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "expected http(s)://HOST[:PORT][/PATH]"
    if "@" in parts.netloc:
        return "a URL with user:password; give the router its key another way"
    if "?" in url or "#" in url:
        return ("a query string or fragment would reach the router's config (a token in it would be "
                "published); give the base URL alone")
    if (netloc := _NETLOC.fullmatch(parts.netloc)) is None:
        return "not a URL with a valid host and port"
    if netloc[1] is not None and not 1 <= int(netloc[1]) <= MAX_PORT:
        return f"the port must be from 1 to {MAX_PORT:,}"
    return None


def shown_base(url: str) -> str:
    """An api_base in a message: quoted on one line (config.ranges.shown), without the user:password,
    query string or fragment the message would publish."""
    return shown(redact_url(url).split("?")[0].split("#")[0])


def api_base_problems(node: NodeBlock) -> list[str]:
    """Why the node's api_bases cannot go into a fleet router's config, beyond the form every api_base
    holds to (api_base_problem, checked when the block was made or read). These are the fleet's own
    rules, kept here alone: a loopback host is refused (`satbench capability` writes one for a router
    on the node itself; a fleet's router runs on another machine and cannot reach it), and the whole
    host must be the node id, the hostname or its first label, or one of the node's addresses
    (node-a.example.com is not node-a)."""
    names = {node.node_id.lower(), node.hostname.lower(), node.hostname.split(".")[0].lower()}
    own = set(node.addresses)
    out = []
    for lane, url in sorted(node.api_base.items()):
        host = (urllib.parse.urlsplit(url).hostname or "").lower()
        if is_loopback(url):
            out.append(f"lane {lane}: api_base {shown_base(url)} is loopback: a router on another machine "
                       "cannot reach it")
        elif host not in names and _bare_ip(host) not in own:
            out.append(f"lane {lane}: api_base {shown_base(url)} names {shown(host)}, which is not this node "
                       f"({node.node_id}, hostname {shown(node.hostname)}, addresses "
                       f"{', '.join(node.addresses) or 'none'})")
    return out


def _bare_ip(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return host
