"""Prometheus rules, alerts and Grafana dashboards for gpupack, generated from one source."""
