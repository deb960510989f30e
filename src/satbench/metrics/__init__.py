"""Metrics of one level computed from raw records alone (docs/metrics.md): one module per family,
each a pure function of events and samples."""
