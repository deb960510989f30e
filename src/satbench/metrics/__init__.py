"""Metrics of one level computed from raw records alone (docs/definitions.md#measurement): one module
per family, each a pure function of events and samples."""
