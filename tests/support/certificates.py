"""A certificate authority made at test time, and server certificates it signs (cryptography).

``TestCA(dir).server("127.0.0.1", "localhost")`` writes ``<name>.pem`` (the server's
certificate, then the intermediate's when there is one) and ``<name>.key`` (PKCS#8, mode 600)
and returns their paths; ``ca.pem`` is the root clients trust (``ssl_context()``).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class ServerFiles:
    cert: Path
    key: Path


class TestCA:
    """A root CA (and, on request, an intermediate) under ``directory``."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path, name: str = "Cairn Test Root CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.key = _key()
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.path = directory / "ca.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def ssl_context(self) -> ssl.SSLContext:
        """A client context trusting this CA only, checking host names."""
        return ssl.create_default_context(cafile=str(self.path))

    def server(
        self,
        *hosts: str,
        name: str = "server",
        via_intermediate: bool = False,
        valid_days: float = 30,
        valid_from_days: float = 0,
    ) -> ServerFiles:
        """A server certificate for ``hosts`` (IP addresses or DNS names), signed by the root
        or by an intermediate (then written after the server's certificate, as a
        ``fullchain.pem``)."""
        issuer_key, issuer_cert, chain = self.key, self.cert, b""
        now = datetime.datetime.now(datetime.UTC)
        if via_intermediate:
            issuer_key = _key()
            issuer_cert = (
                x509.CertificateBuilder()
                .subject_name(_name(f"{name} intermediate CA"))
                .issuer_name(self.cert.subject)
                .public_key(issuer_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .sign(self.key, hashes.SHA256())
            )
            chain = issuer_cert.public_bytes(serialization.Encoding.PEM)
        key = _key()
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        start = now + datetime.timedelta(days=valid_from_days) - datetime.timedelta(minutes=5)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(hosts[0] if hosts else name))
            .issuer_name(issuer_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(now + datetime.timedelta(days=valid_days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(issuer_key, hashes.SHA256())
        )
        cert_path = self.directory / f"{name}.pem"
        key_path = self.directory / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + chain)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_pem_key(key))
        return ServerFiles(cert_path, key_path)

    def client(self, common_name: str, name: str | None = None) -> ServerFiles:
        """A client certificate (TLS client authentication) whose subject CN is
        ``common_name``, signed by the root; ``<name>.pem`` and ``<name>.key``."""
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        stem = name or f"client-{common_name}"
        cert_path = self.directory / f"{stem}.pem"
        key_path = self.directory / f"{stem}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_pem_key(key))
        return ServerFiles(cert_path, key_path)
