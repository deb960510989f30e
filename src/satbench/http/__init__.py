"""http: how satbench talks to a server.

`endpoint` (Endpoint: base URL, headers, TLS policy; the URL helpers), `errors` (the one map from
what a server or the network raises to what satbench records), `access` (API key, TLS policy,
bounded reads), `transport` + `framing` + `sse` + `client` (streamed completions), `promparse` (/metrics).

Three HTTP stacks, the two borrowed ones each behind one entry point of access.py:
- satbench's own asyncio transport (transport.py): the load generator's streams, stamped in
  buffer_updated (read into one lent buffer); one connection per request (Connection: close).
- aiohttp (access.EndpointSession): probe, RTT, /tokenize, sampler, liveness; kept-alive
  connections, so no connect lands in a recorded RTT or a sampler poll: a new connection per GET
  /health takes 2.2-2.3x the kept-alive round trip on loopback (p50 0.37 vs 0.16-0.17 ms,
  benchmarks/http_keepalive.py). Its error texts are recorded.
- urllib (access.get_bytes): the synchronous callers (preflight checks, capability, native's
  /health poll); its error texts (strerror) are what those callers report.
"""
