"""Saturation analysis: knee, Universal Scalability Law, SLO bound, recommendation
(docs/recommendations.md)."""
