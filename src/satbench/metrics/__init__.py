"""Metrics of one level computed from raw records alone (DESIGN.md §4): one module per family,
each a pure function of events and samples."""
