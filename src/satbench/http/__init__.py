"""http: how satbench talks to a server.

`endpoint` (Endpoint: base URL, headers, TLS policy; the URL helpers), `errors` (the one map from
what a server or the network raises to what satbench records), `access` (API key, TLS policy,
bounded reads), `transport` + `sse` + `client` (streamed completions), `promparse` (/metrics).

Three HTTP stacks remain, the two borrowed ones each behind one entry point of access.py:
- satbench's own asyncio transport (transport.py): the load generator's streams, stamped in
  data_received; one connection per request (Connection: close).
- aiohttp (access.EndpointSession: probe, RTT, /tokenize, sampler, liveness, preflight /tokenize)
  stays: those reads reuse kept-alive connections (the own transport reconnects per request, which
  would put a connect into every recorded RTT and 20 connects/s onto the server from the sampler), and
  their error texts are recorded: a refused connect reads "ClientConnectorError: Cannot connect to
  host 127.0.0.1:9 ssl:default [Connect call failed ('127.0.0.1', 9)]" (aiohttp) where the own
  transport raises "ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 9)"
  (measured); tests pin "/tokenize failed: ServerDisconnectedError".
- urllib (access.get_bytes: preflight checks, capability, native's /health poll) stays: its callers
  are synchronous, and "cannot reach URL: Connection refused" (urllib's strerror) would become
  "Connect call failed ('127.0.0.1', 9)" (asyncio's, measured).
"""
