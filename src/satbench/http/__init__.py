"""Talking HTTP to a server: satbench's own streaming transport and SSE splitter, the completion
client, bounded GET helpers (`access`) and the Prometheus text parser (`promparse`)."""
