"""Issue a private CA and a serving certificate, as pure functions returning PEM bytes.

The API server verifies a webhook against the `caBundle` of its configuration and the Service DNS names
(`svc`, `svc.ns`, `svc.ns.svc`); `webhook_sans()` lists them so nobody forgets one.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key, PEM encoded."""

    cert_pem: bytes
    key_pem: bytes


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def issue_ca(common_name: str = "gpupack-ca", days: int = 3650) -> KeyPair:
    """A self-signed CA allowed to sign serving certificates only (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_serving_cert(
    ca: KeyPair,
    dns_names: list[str],
    ips: list[str],
    days: int = 365,
    valid_from: datetime.datetime | None = None,
    usage: x509.ObjectIdentifier = ExtendedKeyUsageOID.SERVER_AUTH,
) -> KeyPair:
    """A server certificate signed by `ca` for the given DNS names and IP addresses, valid from `valid_from`
    (default: five minutes ago, for clocks a little behind) for `days`. `usage` CLIENT_AUTH makes it a client
    certificate instead (what kube-scheduler presents to an extender that verifies its callers).

    Raises ValueError when no name is given or an IP address does not parse.
    """
    if not dns_names and not ips:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key issued by issue_ca()")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (dns_names or ips)[0][:64])])
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    start = valid_from if valid_from is not None else _now() - datetime.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=days, minutes=5))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def webhook_sans(service: str, namespace: str) -> list[str]:
    """The DNS names the API server may use to reach a Service: `svc`, `svc.ns`, `svc.ns.svc`."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc"]


def ca_bundle(ca_cert_pem: bytes) -> str:
    """The `caBundle` value of a webhook configuration: base64 of the CA's PEM."""
    return base64.b64encode(ca_cert_pem).decode()


def write_pair(directory: Path, ca: KeyPair, serving: KeyPair, prefix: str = "tls") -> None:
    """Write `ca.crt`, `ca.key`, `<prefix>.crt`, `<prefix>.key` (with `tls`, a kubernetes.io/tls Secret's names);
    private keys 0600."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data, mode in (
        ("ca.crt", ca.cert_pem, 0o644),
        ("ca.key", ca.key_pem, 0o600),
        (f"{prefix}.crt", serving.cert_pem, 0o644),
        (f"{prefix}.key", serving.key_pem, 0o600),
    ):
        path = directory / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        tmp.chmod(mode)
        tmp.replace(path)
