"""The scheduler extender benchmark: `python -m bench.extender` (see `__main__`)."""
