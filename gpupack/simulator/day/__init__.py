"""The synthetic day: a scenario of node pools and workloads replayed minute by minute through the webhook's
`plan()` and the extender's placement, without gpupack and under each scoring policy, and with any MIG layout."""
