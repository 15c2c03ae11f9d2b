"""The kube-scheduler extender: filter and score nodes by live DCGM utilization and free GPU slots.

`inventory` and `demand` read nodes and pods, `state` and `informer` keep the cluster, `live` and `sources` the
DCGM view, `filter`, `score`, `packing` and `fragmentation` decide (pure), `verbs`, `wire` and `app` answer
kube-scheduler, `service` runs it all.
"""
