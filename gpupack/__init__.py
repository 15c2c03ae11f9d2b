"""gpupack's shared core: the policy, the webhook/extender contract, partial Kubernetes models, quantities,
the GPU catalog, the server bootstrap and the command line."""

__version__ = "0.1.0"
