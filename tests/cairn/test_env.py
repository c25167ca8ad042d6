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
