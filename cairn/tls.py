"""The listeners' TLS credentials: ``CAIRN_TLS_CERT`` and ``CAIRN_TLS_KEY``, read and
checked once when the broker starts; both listeners (HTTP and Kafka) serve the same pair.

The certificate file holds the server's certificate first, then any intermediate
certificates (the usual ``fullchain.pem``); the key file its private key (PEM, not
encrypted: the broker starts unattended). :func:`load` refuses, with one line naming the file
and what is wrong, a missing or unreadable file, a file with no PEM certificate or key, and a
key that does not belong to the certificate; an expired or not yet valid certificate only
gets a warning from :func:`validity_warning` (the operator may be replacing it).

:func:`twisted_options` turns the credentials into the Twisted TLS options the HTTP listener
(daphne) uses: TLS 1.2 or newer (1.2 with forward-secret AEAD suites only), the whole chain
sent, no client certificates asked for. :func:`kafka_ssl_context` makes the Kafka listener's
stdlib :class:`ssl.SSLContext` (asyncio's TLS) with the same rules, and, with ``CAIRN_TLS_CA``,
asks clients for a certificate: optional (SASL clients need none), but one that is sent must
chain to that CA, and its subject CN then names the Cairn user the connection acts as.
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa

#: Private keys a TLS server can sign its handshake with (what OpenSSL takes).
SigningKey = (
    rsa.RSAPrivateKey
    | ec.EllipticCurvePrivateKey
    | ed25519.Ed25519PrivateKey
    | ed448.Ed448PrivateKey
    | dsa.DSAPrivateKey
)


class TLSConfigError(ValueError):
    """The certificate or key cannot be used; the message says which file and why."""


@dataclass(frozen=True)
class ServerCredentials:
    """A certificate chain (the server's own first) and its private key."""

    cert_path: Path
    key_path: Path
    chain: tuple[x509.Certificate, ...]
    key: SigningKey

    @property
    def certificate(self) -> x509.Certificate:
        return self.chain[0]

    @property
    def subject(self) -> str:
        return self.certificate.subject.rfc4514_string()


def _read(path: Path, setting: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TLSConfigError(f"{setting} {path}: cannot read it ({exc.strerror})") from None


def load(cert_path: Path, key_path: Path) -> ServerCredentials:
    """Read and check the pair (module docstring).

    Raises:
        TLSConfigError: a file cannot be read, holds no PEM certificate or key, the key is
            encrypted, or it does not match the certificate.
    """
    cert_pem = _read(cert_path, "CAIRN_TLS_CERT")
    key_pem = _read(key_path, "CAIRN_TLS_KEY")
    try:
        chain = tuple(x509.load_pem_x509_certificates(cert_pem))
    except ValueError:
        raise TLSConfigError(
            f"CAIRN_TLS_CERT {cert_path}: no PEM certificate in it "
            "(expected -----BEGIN CERTIFICATE----- blocks)"
        ) from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise TLSConfigError(
            f"CAIRN_TLS_KEY {key_path}: the key is encrypted; give the broker an unencrypted "
            "key (mode 600)"
        ) from None
    except ValueError:
        raise TLSConfigError(
            f"CAIRN_TLS_KEY {key_path}: no PEM private key in it "
            "(expected a -----BEGIN PRIVATE KEY----- block)"
        ) from None
    if not isinstance(key, SigningKey):
        raise TLSConfigError(
            f"CAIRN_TLS_KEY {key_path}: a {type(key).__name__} cannot sign a TLS handshake "
            "(expected an RSA, EC or EdDSA key)"
        )
    if _public_der(key.public_key()) != _public_der(chain[0].public_key()):
        raise TLSConfigError(
            f"CAIRN_TLS_KEY {key_path} is not the private key of the certificate in "
            f"CAIRN_TLS_CERT {cert_path} ({chain[0].subject.rfc4514_string()})"
        )
    return ServerCredentials(cert_path, key_path, chain, key)


def _public_der(public_key: Any) -> bytes:
    return bytes(
        public_key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def validity_warning(
    credentials: ServerCredentials, now: datetime.datetime | None = None
) -> str | None:
    """A warning when the server's certificate is not valid at ``now`` (default: now)."""
    now = now or datetime.datetime.now(datetime.UTC)
    cert = credentials.certificate
    if now > cert.not_valid_after_utc:
        return (
            f"CAIRN_TLS_CERT {credentials.cert_path}: the certificate expired on "
            f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; clients will refuse it"
        )
    if now < cert.not_valid_before_utc:
        return (
            f"CAIRN_TLS_CERT {credentials.cert_path}: the certificate is valid only from "
            f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC; clients will refuse it until then"
        )
    return None


#: TLS 1.2 suites: forward secrecy and AEAD only (TLS 1.3 has its own, all of them AEAD).
TLS12_CIPHERS = b"ECDHE+AESGCM:ECDHE+CHACHA20"


class ServerContextFactory:
    """What Twisted's TLS layer asks for a server context (``getContext``): one OpenSSL
    context for the listener, with the certificate, the rest of the chain and the key."""

    def __init__(self, credentials: ServerCredentials) -> None:
        from OpenSSL import SSL

        ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
        ctx.set_min_proto_version(SSL.TLS1_2_VERSION)
        ctx.set_cipher_list(TLS12_CIPHERS)
        ctx.set_options(SSL.OP_NO_COMPRESSION)
        ctx.use_certificate(credentials.certificate)
        for intermediate in credentials.chain[1:]:
            ctx.add_extra_chain_cert(intermediate)
        ctx.use_privatekey(credentials.key)
        ctx.check_privatekey()
        self._context = ctx

    def getContext(self) -> Any:  # Twisted's name for it
        return self._context


def twisted_options(credentials: ServerCredentials) -> ServerContextFactory:
    """The context factory daphne's listener is wrapped with (``runbroker``)."""
    return ServerContextFactory(credentials)


def kafka_ssl_context(
    credentials: ServerCredentials, client_ca: Path | None = None
) -> ssl.SSLContext:
    """The Kafka listener's server context (module docstring): TLS 1.2+, forward-secret AEAD
    suites on 1.2, the whole chain sent; with ``client_ca`` (``CAIRN_TLS_CA``) client
    certificates are asked for and, when sent, verified against it.

    Raises:
        TLSConfigError: ``client_ca`` cannot be read or holds no certificate.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS.decode())
    context.options |= ssl.OP_NO_COMPRESSION
    context.load_cert_chain(credentials.cert_path, credentials.key_path)
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise TLSConfigError(
                f"CAIRN_TLS_CA {client_ca}: cannot use it as a CA file ({exc})"
            ) from None
        context.verify_mode = ssl.CERT_OPTIONAL
    return context
