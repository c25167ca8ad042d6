import pytest

from cairn import env


def test_bad_port_is_one_readable_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_HTTP_PORT", "eighty")
    with pytest.raises(SystemExit, match="CAIRN_HTTP_PORT: expected a port number, got 'eighty'"):
        env.get_port("CAIRN_HTTP_PORT", 8080)


def test_bad_integer_is_one_readable_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_KAFKA_IDLE_MS", "10min")
    with pytest.raises(
        SystemExit, match="CAIRN_KAFKA_IDLE_MS: expected a whole number, got '10min'"
    ):
        env.get_int("CAIRN_KAFKA_IDLE_MS", 600_000)
    monkeypatch.setenv("CAIRN_KAFKA_IDLE_MS", "-1")
    with pytest.raises(SystemExit, match="must be at least 0, got -1"):
        env.get_int("CAIRN_KAFKA_IDLE_MS", 600_000)
    monkeypatch.setenv("CAIRN_KAFKA_IDLE_MS", "")
    assert env.get_int("CAIRN_KAFKA_IDLE_MS", 600_000) == 600_000


def test_choice_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_SERVICES", "threads")
    with pytest.raises(SystemExit, match="expected one of inline, celery"):
        env.get_choice("CAIRN_SERVICES", "inline", ("inline", "celery"))


def test_postgres_url_becomes_django_database() -> None:
    db = env.database_from_url("postgres://cairn:s%40cret@db.example:5433/broker")
    assert db == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "broker",
        "USER": "cairn",
        "PASSWORD": "s@cret",
        "HOST": "db.example",
        "PORT": "5433",
    }


def test_every_variable_is_documented_in_readme() -> None:
    readme = (env.BASE_DIR / "README.md").read_text()
    rows = {line.split("|")[1].strip() for line in readme.splitlines() if line.startswith("| `")}
    missing = [v.name for v in env.VARIABLES if f"`{v.name}`" not in rows]
    assert missing == []
    # The whole table as `manage.py envtable` prints it: defaults and meanings stay in step.
    assert env.readme_table() in readme


def test_every_variable_the_code_reads_is_in_the_table() -> None:
    import re

    names: set[str] = set()
    for package in ("cairn", "mqcore", "workers", "api", "webui", "kafka_listener", "pipeline"):
        for path in (env.BASE_DIR / package).rglob("*.py"):
            names |= set(re.findall(r"[\"'](CAIRN_[A-Z0-9_]+)[\"']", path.read_text()))
    documented = {v.name for v in env.VARIABLES}
    assert sorted(names - documented) == []


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
     ("127.0.0.2", True), ("0.0.0.0", False), ("::", False), ("", False),
     ("10.0.0.5", False), ("broker.example.com", False)],
)  # fmt: skip
def test_loopback_bind_addresses(host: str, loopback: bool) -> None:
    assert env.is_loopback(host) is loopback


def test_kafka_auth_defaults_by_bind_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_KAFKA_AUTH", raising=False)
    assert env.kafka_auth("127.0.0.1") == "optional"
    assert env.kafka_auth("0.0.0.0") == "required"
    monkeypatch.setenv("CAIRN_KAFKA_AUTH", "none")  # said explicitly: allowed anywhere
    assert env.kafka_auth("0.0.0.0") == "none"
    monkeypatch.setenv("CAIRN_KAFKA_AUTH", "Required")
    assert env.kafka_auth("127.0.0.1") == "required"


def test_a_public_listener_refuses_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_KAFKA_AUTH", "optional")
    with pytest.raises(SystemExit, match="CAIRN_KAFKA_AUTH=optional would let anyone reaching"):
        env.kafka_auth("0.0.0.0")
    monkeypatch.setenv("CAIRN_KAFKA_AUTH", "maybe")
    with pytest.raises(SystemExit, match="CAIRN_KAFKA_AUTH: expected one of required, optional"):
        env.kafka_auth("127.0.0.1")


def test_anonymous_role_and_client_ca(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_KAFKA_ANONYMOUS_ROLE", raising=False)
    assert env.kafka_anonymous_role() == "operator"
    monkeypatch.setenv("CAIRN_KAFKA_ANONYMOUS_ROLE", "none")
    assert env.kafka_anonymous_role() == ""
    monkeypatch.setenv("CAIRN_KAFKA_ANONYMOUS_ROLE", "root")
    with pytest.raises(SystemExit, match="CAIRN_KAFKA_ANONYMOUS_ROLE: expected one of viewer"):
        env.kafka_anonymous_role()
    monkeypatch.delenv("CAIRN_TLS_CERT", raising=False)
    monkeypatch.delenv("CAIRN_TLS_KEY", raising=False)
    monkeypatch.setenv("CAIRN_TLS_CA", "/etc/ca.pem")
    with pytest.raises(SystemExit, match="CAIRN_TLS_CA: needs CAIRN_TLS_CERT and CAIRN_TLS_KEY"):
        env.tls_ca()
