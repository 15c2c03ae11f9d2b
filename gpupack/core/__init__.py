"""gpupack's shared core: the policy, the webhook/extender contract, partial Kubernetes models, quantities,
the GPU catalog and the server bootstrap. It imports no service and no tool above it."""
