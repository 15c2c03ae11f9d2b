"""The node utilization classes' thresholds, percent of the mean GPU utilization (the guide's values).

A stub with the numbers only, so the dashboards import them from where the rules and alerts will: the module the
rules are generated from replaces it.
"""

IDLE = 10.0
"""Under this over 7 days: idle."""
UNDERUSED = 30.0
"""Under this over 7 days: underused."""
HOT = 85.0
"""Over this: hot, capacity may be short."""
