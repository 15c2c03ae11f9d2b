"""`python -m bench.report`: the report against a week of a 500-node cluster backfilled into a real Prometheus."""
