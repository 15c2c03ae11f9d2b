"""Certificates for gpupack's TLS servers: issue a CA and serving certificates, build and refresh SSL contexts.

A leaf package: it depends on `cryptography` and the standard library only.
"""
