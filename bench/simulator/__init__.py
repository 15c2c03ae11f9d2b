"""Simulator benchmark: `python -m bench.simulator`."""
