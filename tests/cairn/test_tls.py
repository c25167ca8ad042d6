"""cairn.tls: the HTTP listener's certificate and key are checked once, with one line per
fault; and the TLS settings themselves (cairn.env)."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from cairn import env, tls
from tests.support.certificates import TestCA


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("ca"))


def test_a_full_chain_loads_leaf_first(ca: TestCA) -> None:
    files = ca.server("127.0.0.1", "broker.example", via_intermediate=True, name="chain")
    loaded = tls.load(files.cert, files.key)
    assert len(loaded.chain) == 2
    assert loaded.subject == "CN=127.0.0.1"
    assert loaded.chain[1].subject.rfc4514_string() == "CN=chain intermediate CA"
    assert tls.validity_warning(loaded) is None
    options = tls.twisted_options(loaded)
    assert options.getContext() is not None  # OpenSSL accepts the key, chain and versions


def test_faults_are_one_line_naming_the_file(ca: TestCA, tmp_path: Path) -> None:
    good = ca.server("127.0.0.1", name="good")
    other = ca.server("127.0.0.1", name="other")
    missing = tmp_path / "missing.pem"
    with pytest.raises(tls.TLSConfigError, match=f"CAIRN_TLS_CERT {missing}: cannot read it"):
        tls.load(missing, good.key)
    with pytest.raises(tls.TLSConfigError, match=f"CAIRN_TLS_KEY {missing}: cannot read it"):
        tls.load(good.cert, missing)

    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(tls.TLSConfigError, match="no PEM certificate in it"):
        tls.load(garbage, good.key)
    with pytest.raises(tls.TLSConfigError, match="no PEM private key in it"):
        tls.load(good.cert, garbage)
    # The certificate given as the key, the key as the certificate.
    with pytest.raises(tls.TLSConfigError, match="no PEM private key in it"):
        tls.load(good.cert, good.cert)
    with pytest.raises(tls.TLSConfigError, match="no PEM certificate in it"):
        tls.load(good.key, good.key)

    with pytest.raises(tls.TLSConfigError, match="is not the private key of the certificate"):
        tls.load(good.cert, other.key)

    key = serialization.load_pem_private_key(good.key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(tls.TLSConfigError, match="the key is encrypted"):
        tls.load(good.cert, encrypted)


def test_a_certificate_out_of_its_validity_is_warned_about(ca: TestCA) -> None:
    expired = ca.server("127.0.0.1", name="expired", valid_from_days=-10, valid_days=-1)
    warning = tls.validity_warning(tls.load(expired.cert, expired.key))
    assert warning is not None and "the certificate expired on" in warning
    future = ca.server("127.0.0.1", name="future", valid_from_days=2, valid_days=10)
    warning = tls.validity_warning(tls.load(future.cert, future.key))
    assert warning is not None and "valid only from" in warning
    good = tls.load(*ca.server("127.0.0.1", name="now").__dict__.values())
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=60)
    assert tls.validity_warning(good, later) is not None


def test_tls_settings_go_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_TLS_CERT", raising=False)
    monkeypatch.delenv("CAIRN_TLS_KEY", raising=False)
    assert env.tls_files() is None
    monkeypatch.setenv("CAIRN_TLS_CERT", "/etc/cairn/cert.pem")
    with pytest.raises(SystemExit, match="CAIRN_TLS_KEY: required with CAIRN_TLS_CERT"):
        env.tls_files()
    monkeypatch.setenv("CAIRN_TLS_KEY", "/etc/cairn/key.pem")
    assert env.tls_files() == (Path("/etc/cairn/cert.pem"), Path("/etc/cairn/key.pem"))
    monkeypatch.delenv("CAIRN_TLS_CERT")
    with pytest.raises(SystemExit, match="CAIRN_TLS_CERT: required with CAIRN_TLS_KEY"):
        env.tls_files()


def test_allowed_origins_are_parsed_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "CAIRN_ALLOWED_ORIGINS", " https://Console.Example.com , http://[::1]:8080,https://h:443"
    )
    origins = env.allowed_origins()
    assert origins == (
        ("https", "console.example.com", 443),
        ("http", "::1", 8080),
        ("https", "h", 443),
    )
    assert [env.origin_text(o) for o in origins] == [
        "https://console.example.com",
        "http://[::1]:8080",
        "https://h",
    ]
    for bad in (
        "console.example.com",
        "ftp://x",
        "https://x/path",
        "https://*.example.com",
        "https://x:99999",
        "https://u@x",
    ):
        monkeypatch.setenv("CAIRN_ALLOWED_ORIGINS", bad)
        with pytest.raises(SystemExit, match="CAIRN_ALLOWED_ORIGINS: "):
            env.allowed_origins()


def test_kafka_context_asks_for_client_certificates_with_a_ca(ca: TestCA, tmp_path: Path) -> None:
    files = ca.server("127.0.0.1")
    credentials = tls.load(files.cert, files.key)
    plain = tls.kafka_ssl_context(credentials)
    assert plain.verify_mode == ssl.CERT_NONE
    assert plain.minimum_version == ssl.TLSVersion.TLSv1_2
    with_ca = tls.kafka_ssl_context(credentials, ca.path)
    assert with_ca.verify_mode == ssl.CERT_OPTIONAL  # SASL_SSL clients send none
    not_a_ca = tmp_path / "not-a-ca.pem"
    not_a_ca.write_text("hello\n")
    with pytest.raises(tls.TLSConfigError, match="CAIRN_TLS_CA .*not-a-ca.pem: cannot use it"):
        tls.kafka_ssl_context(credentials, not_a_ca)
