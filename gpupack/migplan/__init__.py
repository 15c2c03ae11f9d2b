"""`gpupack mig-plan`: MIG layouts chosen from demand, and a safe way to apply them to nodes.

`geometry` says which sets of MIG instances one GPU can hold (NVIDIA's placement rules, as data), `stock` holds
mig-parted's stock layouts, `solve` picks per-GPU layouts that serve a demand with the fewest GPUs and then nodes,
and `apply` relabels idle nodes one at a time behind cordons, waiting on the MIG manager's state label.
"""
