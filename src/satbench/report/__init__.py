"""The evidence bundle from results and recommendations: EVIDENCE.md, report.html, plots, results.csv,
SHA256SUMS (`bundle`), their integrity check (`integrity`), tables and comparisons."""
