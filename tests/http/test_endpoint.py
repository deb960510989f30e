"""http.endpoint.Endpoint (one server's URL, headers, TLS policy) and http.errors (the exception map)."""

from __future__ import annotations

import dataclasses
import ssl

import aiohttp
import pytest

from satbench.http.endpoint import Endpoint, tls_context
from satbench.http.errors import (
    NETWORK_ERRORS,
    TlsRefused,
    Unreachable,
    describe,
    request_failed,
    status_phrase,
    tls_cause,
)


def test_an_endpoint_is_one_immutable_value_that_never_shows_its_key():
    ep = Endpoint.of("https://gw.example:8443/llm/", {"Authorization": "Bearer s3cret"})
    assert ep.base_url == "https://gw.example:8443/llm"
    assert ep.url("/props") == "https://gw.example:8443/llm/props"
    assert (ep.host, ep.port, ep.is_https, ep.has_key) == ("gw.example", 8443, True, True)
    assert "s3cret" not in repr(ep) and "s3cret" not in str(ep)
    assert ep.headers == {"Authorization": "Bearer s3cret"}
    ep.headers["Authorization"] = "changed"  # a copy: the endpoint keeps its own
    assert ep.headers == {"Authorization": "Bearer s3cret"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        ep.base_url = "http://elsewhere"  # type: ignore[misc]


def test_the_tls_policy_of_an_endpoint():
    plain = Endpoint.of("http://127.0.0.1:8080")
    assert (plain.port, plain.has_key, plain.ssl_context) == (8080, False, None)
    default = Endpoint.of("https://example.com")
    assert default.port == 443 and default.ssl_context is default.ssl_context  # made once
    assert default.ssl_context.verify_mode == ssl.CERT_REQUIRED
    own = tls_context(verify=False)
    assert Endpoint.of("https://example.com", tls=own).ssl_context is own


def test_the_exception_map():
    for exc in (OSError(), TimeoutError(), ssl.SSLError(), aiohttp.ClientConnectionError(),
                aiohttp.ServerDisconnectedError()):
        assert isinstance(exc, NETWORK_ERRORS)
    assert describe(ValueError("bad")) == "ValueError: bad" and describe(TimeoutError()) == "TimeoutError"
    refused = request_failed("http://h:1/health", ConnectionRefusedError(111, "Connect call failed ('h', 1)"))
    assert isinstance(refused, Unreachable) and refused.reason == "Connection refused"  # the system's phrase
    assert str(refused) == "http://h:1/health: Connection refused"
    assert refused.detail == "ConnectionRefusedError: [Errno 111] Connect call failed ('h', 1)"
    assert status_phrase(401) == "HTTP 401 Unauthorized" and status_phrase(599) == "HTTP 599"
    cert = ssl.SSLCertVerificationError(1, "x")
    cert.verify_message = "self-signed certificate"
    assert tls_cause(cert) is cert and tls_cause(ConnectionRefusedError()) is None
    failed = request_failed("https://h", cert)
    assert isinstance(failed, TlsRefused)
    assert str(failed).startswith("https://h: certificate verify failed: self-signed certificate; "
                                  "pass --ca-cert")
