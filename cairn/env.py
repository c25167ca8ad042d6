"""Settings from ``CAIRN_*`` environment variables, parsed in one place.

Every variable the project reads is listed in :data:`VARIABLES` with its default and meaning;
the README's table is written from it (``python manage.py envtable`` prints it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    meaning: str


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "CAIRN_DATA_DIR",
        "./var",
        "Where the broker keeps its own files (SQLite database, secret key).",
    ),
    Variable(
        "CAIRN_STORE_DIR", "$CAIRN_DATA_DIR/store", "The message store directory (RocketMQ layout)."
    ),
    Variable("CAIRN_HTTP_HOST", "127.0.0.1", "Address the HTTP/WebSocket server listens on."),
    Variable("CAIRN_HTTP_PORT", "8080", "Port of the REST API, the console and the live trace."),
    Variable(
        "CAIRN_KAFKA_PORT", "9092", "Port of the Kafka wire-protocol listener (0 turns it off)."
    ),
    Variable(
        "CAIRN_SERVICES",
        "inline",
        "`inline`: background services run as threads in the broker; `celery`: Celery workers run them.",
    ),
    Variable(
        "CAIRN_REDIS_URL",
        "(unset)",
        "When set, the channel layer and Celery use this Redis (e.g. `redis://127.0.0.1:6379/0`).",
    ),
    Variable(
        "DATABASE_URL",
        "(unset)",
        "Django's database; unset means SQLite under the data dir. `postgres://user:pass@host:5432/name` for PostgreSQL.",
    ),
    Variable(
        "CAIRN_FLUSH",
        "async",
        "CommitLog flush: `async` (returns at once) or `sync` (group commit, returns after fsync).",
    ),
    Variable(
        "CAIRN_AUTO_CREATE_TOPICS",
        "false",
        "Create unknown topics on first send, copying the `TBW102` defaults.",
    ),
    Variable(
        "CAIRN_SECRET_KEY",
        "(generated)",
        "Django secret key; generated once and kept in the data dir when unset.",
    ),
    Variable("CAIRN_DEBUG", "false", "Django debug mode (never in production)."),
    Variable(
        "CAIRN_ALLOWED_HOSTS",
        "localhost,127.0.0.1,[::1]",
        "Comma-separated host names the HTTP server answers to.",
    ),
    Variable("CAIRN_LOG_LEVEL", "INFO", "Log level of the broker process."),
)


def get(name: str, default: str) -> str:
    value = os.environ.get(name, "").strip()
    return value if value else default


def get_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise SystemExit(f"{name}: expected true or false, got {raw!r}")


def get_port(name: str, default: int) -> int:
    raw = get(name, str(default))
    try:
        port = int(raw)
    except ValueError:
        raise SystemExit(f"{name}: expected a port number, got {raw!r}") from None
    if not 0 <= port <= 65535:
        raise SystemExit(f"{name}: port must be between 0 and 65535, got {port}")
    return port


def get_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = get(name, default).lower()
    if value not in choices:
        raise SystemExit(f"{name}: expected one of {', '.join(choices)}, got {value!r}")
    return value


def data_dir() -> Path:
    return (BASE_DIR / get("CAIRN_DATA_DIR", "var")).resolve()


def store_dir() -> Path:
    raw = get("CAIRN_STORE_DIR", "")
    return Path(raw).resolve() if raw else data_dir() / "store"


def database_from_url(url: str) -> dict[str, object]:
    """Django DATABASES entry from a ``postgres://`` or ``sqlite:///`` URL."""
    parsed = urlparse(url)
    if parsed.scheme in {"postgres", "postgresql", "pgsql"}:
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
        }
    if parsed.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": unquote(parsed.path)}
    raise SystemExit(
        f"DATABASE_URL: unsupported scheme {parsed.scheme!r} (use postgres:// or sqlite:///)"
    )


def secret_key() -> str:
    """The configured key, or one generated on first use and kept (mode 600) in the data dir."""
    configured = get("CAIRN_SECRET_KEY", "")
    if configured:
        return configured
    path = data_dir() / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    import secrets

    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key
