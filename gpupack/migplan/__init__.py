"""`gpupack mig-plan`: MIG layouts chosen from demand, and a safe way to apply them to nodes.

The placement rules and mig-parted's stock layouts are the GPU catalog's (`gpupack.core.gpus`). Here `demand`
sizes the pods through the webhook, `forecast` reads a peak from Prometheus, `solve` picks per-GPU layouts that
serve a demand with the fewest GPUs and then nodes, `config` names them for mig-parted, and `apply` relabels idle
nodes one at a time behind cordons, waiting on the MIG manager's state label.
"""
