"""Where a pod goes and what that costs, as kube-scheduler and the device plugin decide it: kube-scheduler's own
filters and score sum, the device plugin's accounting of GPUs in use, and the choice of a node with and without
the gpupack extender. Below the report, the simulator and the demo, which all place pods with it."""
