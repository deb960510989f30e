"""Fairness and starvation checks (DESIGN.md §6): workloads that record raw events, and verdicts
computed from those events alone (so `satbench analyze` recomputes them)."""
