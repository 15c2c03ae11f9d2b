"""The mutating admission webhook: workload labels in, GPU requests, placement and priority out."""
