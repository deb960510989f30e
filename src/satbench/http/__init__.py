"""http: how satbench talks to a server.

`endpoint` (Endpoint: base URL, headers, TLS policy; the URL helpers), `errors` (the one map from
what a server or the network raises to what satbench records), `access` (API key, TLS policy,
bounded reads), `transport` + `framing` + `sse` + `client` (streamed completions), `promparse` (/metrics).

Two HTTP stacks:
- satbench's own asyncio transport (transport.py): the load generator's streams, stamped in
  buffer_updated (read into one lent buffer); one connection per request (Connection: close).
- aiohttp, behind access.read / read_sync (one bounded read: (status, body) within a byte limit and
  a deadline; only http.errors.RequestFailed escapes): probe, RTT, /tokenize, sampler, liveness,
  preflight, capability, native's /health poll. An EndpointSession keeps connections alive, so no
  connect lands in a recorded RTT or a sampler poll: a new connection per GET /health takes
  2.2-2.3x the kept-alive round trip on loopback (p50 0.37 vs 0.16-0.17 ms,
  benchmarks/http_keepalive.py). read_sync runs it on an event loop of its own.
"""
