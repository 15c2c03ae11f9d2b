"""Server SSL contexts that can take a new certificate without a restart, and only a certificate that is valid.

`SSLContext.load_cert_chain()` on a live context changes the certificate for new handshakes only; connections
already open keep theirs, so a rotation drops no request in flight. A certificate outside its validity period
loads without complaint but every client refuses it, so it is refused here, by name and date, and the one in
use stays.
"""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

from cryptography import x509


class CertificateProblem(ValueError):
    """A certificate file that reads but must not be served (expired, not yet valid, not a certificate)."""


def validity(cert_file: Path, now: datetime.datetime | None = None) -> datetime.datetime:
    """When the first certificate of `cert_file` (the serving one, before its chain) expires.

    Raises CertificateProblem when it is not PEM, has expired, or is not valid yet at `now`, and OSError when
    the file cannot be read.
    """
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    except ValueError as exc:
        raise CertificateProblem(f"{cert_file}: not a PEM certificate: {exc}") from exc
    moment = now or datetime.datetime.now(datetime.UTC)
    if moment < cert.not_valid_before_utc:
        raise CertificateProblem(f"{cert_file}: not valid before {cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ}")
    if moment > cert.not_valid_after_utc:
        raise CertificateProblem(f"{cert_file}: expired at {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}")
    return cert.not_valid_after_utc


def server_context(cert_file: Path, key_file: Path, client_ca_file: Path | None = None) -> ssl.SSLContext:
    """A TLS 1.2+ server context loaded with the given certificate chain and key; with `client_ca_file`, clients
    must present a certificate that CA signed (mutual TLS).

    Raises OSError when a file cannot be read and ssl.SSLError when they do not form a valid pair.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=client_ca_file)
    return context


def reload_chain(context: ssl.SSLContext, cert_file: Path, key_file: Path) -> datetime.datetime:
    """Load a new certificate and key into a live context; on error the previous pair stays in use. Returns
    the new certificate's expiry.

    A rotation writes the two files one after the other: a mismatched pair raises ssl.SSLError here and the
    caller retries when the next file lands. The pair is checked on a scratch context first, because a failed
    `load_cert_chain()` may leave the live context with a certificate and no matching key. Raises
    CertificateProblem for a certificate outside its validity period.
    """
    expires = validity(cert_file)
    server_context(cert_file, key_file)
    context.load_cert_chain(cert_file, key_file)
    return expires
