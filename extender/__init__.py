"""The kube-scheduler extender (issue #3): filter and score nodes by live DCGM utilization and free GPU slots.

Not built yet; the package exists so the layout and the layering contracts are in place from the start.
"""
