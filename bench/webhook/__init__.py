"""Webhook benchmark: admissions per second and latency over TLS, against a bare aiohttp TLS server."""
