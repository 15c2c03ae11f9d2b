"""The cluster benchmark: the same workday on a living cluster before gpupack, with its requests, and with gpupack."""
