"""Fakes and harnesses for the tests, the benchmarks and the demo: AdmissionReview builders, a DCGM exporter's
text, an HTTP-level API server, a DCGM history in a real Prometheus, hostile review shapes, loopback helpers.
Product code never imports this package (an import-linter contract says so)."""
