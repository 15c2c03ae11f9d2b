"""Server SSL contexts that can take a new certificate without a restart.

`SSLContext.load_cert_chain()` on a live context changes the certificate for new handshakes only; connections
already open keep theirs, so a rotation drops no request in flight.
"""

from __future__ import annotations

import ssl
from pathlib import Path


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A TLS 1.2+ server context loaded with the given certificate chain and key.

    Raises OSError when a file cannot be read and ssl.SSLError when they do not form a valid pair.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def reload_chain(context: ssl.SSLContext, cert_file: Path, key_file: Path) -> None:
    """Load a new certificate and key into a live context; on error the previous pair stays in use.

    A rotation writes the two files one after the other: a mismatched pair raises ssl.SSLError here and the
    caller retries when the next file lands. The pair is checked on a scratch context first, because a failed
    `load_cert_chain()` may leave the live context with a certificate and no matching key.
    """
    server_context(cert_file, key_file)
    context.load_cert_chain(cert_file, key_file)
