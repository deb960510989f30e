"""Load generation: the closed-loop level runner (`loadgen`), the server sampler polling /metrics,
/slots and the process (`sampler`) and the liveness watchdog (`liveness`). Writes raw events."""
