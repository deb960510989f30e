"""satbench: measure where a llama.cpp server stops gaining from concurrency."""

__version__ = "0.1.0"
