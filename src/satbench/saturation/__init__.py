"""Saturation analysis (DESIGN.md §7): knee, Universal Scalability Law, SLO bound, recommendation."""
