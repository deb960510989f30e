"""satbench: measure where a llama.cpp server stops gaining from concurrency.

The packages follow the data flow, and a module imports only from its own package or an earlier
one, never a later one, lazily or for type checking either:

    errors < config < records < host < gguf < http < workload < server < load < run
           < metrics < analysis < saturation < capability < report < pipeline < api < fleet < cli

The measuring side (http, server, load, run) writes raw records; the deriving side (metrics,
analysis, saturation, report) reads them, and imports nothing of http, load or run: what it needs
of a run is in `records`, of a workload in `workload`, of a server's output in `server`.
`capability` asks the node what it runs now, so it may use http and server. `pipeline` alone
composes analyze → recommend → report; the sweep is handed that derivation instead of importing
it. `api` is the Python API (`from satbench import api`): sweep, analyze, recommend, capability,
load_results; `cli` is a thin layer over it. `fleet` drives many nodes through Ray and is handed
the node's sweep by `cli`.
tests/project/test_layers.py checks all of this from the imports.
"""

__version__ = "0.1.0"
