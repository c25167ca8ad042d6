"""Settings from ``CAIRN_*`` environment variables, parsed in one place.

Every variable the project reads is listed in :data:`VARIABLES` with its default and meaning;
the README's table is written from it (``python manage.py envtable`` prints it).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from mqcore.tiered.s3 import S3_VARIABLES

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
        "Where the broker keeps its own files (SQLite database, secret key, the first admin's password), mode 700.",
    ),
    Variable(
        "CAIRN_STORE_DIR", "$CAIRN_DATA_DIR/store", "The message store directory (RocketMQ layout)."
    ),
    Variable("CAIRN_HTTP_HOST", "127.0.0.1", "Address the HTTP/WebSocket server listens on."),
    Variable("CAIRN_HTTP_PORT", "8080", "Port of the REST API, the console and the live trace."),
    Variable(
        "CAIRN_KAFKA_HOST",
        "127.0.0.1",
        "Address the Kafka listener binds (separate from `CAIRN_HTTP_HOST`; a non-loopback one needs authentication, see `CAIRN_KAFKA_AUTH`).",
    ),
    Variable(
        "CAIRN_KAFKA_PORT", "9092", "Port of the Kafka wire-protocol listener (0 turns it off)."
    ),
    Variable(
        "CAIRN_KAFKA_AUTH",
        "(required off loopback, optional on it)",
        "`required`: Kafka clients authenticate (SASL PLAIN, SCRAM-SHA-256/512, or a TLS client certificate) before anything but ApiVersions; `optional`: unauthenticated clients act as `CAIRN_KAFKA_ANONYMOUS_ROLE`; `none`: SASL is not offered and every client acts as that role. A non-loopback `CAIRN_KAFKA_HOST` refuses to start with `optional`, and with `none` unless it is set explicitly.",
    ),
    Variable(
        "CAIRN_KAFKA_ANONYMOUS_ROLE",
        "operator",
        "Role of unauthenticated Kafka clients under `optional`/`none`: `viewer`, `operator`, `admin`, or `none` (ACL entries only).",
    ),
    Variable(
        "CAIRN_KAFKA_REAUTH_MS",
        "0",
        "Lifetime of a Kafka SASL login (Kafka's `connections.max.reauth.ms`, KIP-368): clients re-authenticate within it or are disconnected at their next request; 0 never.",
    ),
    Variable(
        "CAIRN_KAFKA_ADVERTISED_HOST",
        "(the listen host)",
        "Host Kafka clients are told to connect to (Metadata, FindCoordinator), e.g. behind NAT or in a container; a wildcard listen host advertises 127.0.0.1.",
    ),
    Variable(
        "CAIRN_KAFKA_ADVERTISED_PORT",
        "(the listen port)",
        "Port Kafka clients are told to connect to.",
    ),
    Variable(
        "CAIRN_KAFKA_MAX_BUFFERED_BYTES",
        "268435456",
        "Request bytes all Kafka connections together may hold (partial frames and requests being handled); above it, connections adding to them are paused (not read) until it falls, never closed.",
    ),
    Variable(
        "CAIRN_KAFKA_IDLE_MS",
        "600000",
        "A Kafka connection with no request for this long is closed (Kafka's `connections.max.idle.ms`; 0 never).",
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
    # -- the HTTP listener's security (README "Serving over HTTPS") --
    Variable(
        "CAIRN_TLS_CERT",
        "(unset)",
        "PEM file: the server certificate, then any intermediate certificates. With `CAIRN_TLS_KEY` the HTTP port speaks HTTPS and WSS only (REST, console, live trace): Secure cookies, HSTS.",
    ),
    Variable(
        "CAIRN_TLS_KEY",
        "(unset)",
        "PEM file: the certificate's private key (unencrypted; keep it mode 600).",
    ),
    Variable(
        "CAIRN_TLS_CA",
        "(unset)",
        "PEM file of the CA(s) Kafka client certificates must chain to (needs `CAIRN_TLS_CERT`): a client that sends a verified certificate acts as the Cairn user its subject CN names.",
    ),
    Variable(
        "CAIRN_HSTS_SECONDS",
        "31536000",
        "With TLS on: the `Strict-Transport-Security` max-age browsers keep (0 sends none).",
    ),
    Variable(
        "CAIRN_ALLOWED_ORIGINS",
        "(unset)",
        "Comma-separated origins (`https://console.example.com`) besides the broker's own whose pages may post the console's forms and open the live-trace WebSocket, e.g. a reverse proxy's public address.",
    ),
    Variable(
        "CAIRN_LOGIN_THROTTLE_AFTER",
        "5",
        "After this many failed logins in a row, a user's next attempt must wait 1 s, then 2, 4, ... up to 60 s (REST, console, Kafka SASL; 0 never throttles).",
    ),
    Variable(
        "CAIRN_LOGIN_LOCKOUT_AFTER",
        "10",
        "Failed logins in a row that lock a user out (its right password then fails too) until `CAIRN_LOGIN_LOCKOUT_SECONDS` pass or an admin lifts it (0 never locks).",
    ),
    Variable(
        "CAIRN_LOGIN_LOCKOUT_SECONDS",
        "900",
        "How long a lockout lasts (0: until an admin lifts it).",
    ),
    Variable(
        "CAIRN_LOGIN_ADDRESS_MAX_FAILURES",
        "50",
        "Failed logins one client address may make in `CAIRN_LOGIN_ADDRESS_WINDOW_SECONDS` before every login from it is refused until the window ends (0: no limit).",
    ),
    Variable(
        "CAIRN_LOGIN_ADDRESS_WINDOW_SECONDS",
        "300",
        "The window of `CAIRN_LOGIN_ADDRESS_MAX_FAILURES`.",
    ),
    Variable(
        "CAIRN_SCRAM_ITERATIONS",
        "8192",
        "PBKDF2 iterations of new users' SCRAM credentials (at least 4096, RFC 7677).",
    ),
    Variable(
        "CAIRN_METRICS_ALLOW",
        "",
        "Comma-separated addresses or networks (`10.0.0.0/8,::1`) that may scrape `GET /metrics` without a token; unset: none, every scrape needs `Authorization: Token` of a user with a role.",
    ),
    Variable("CAIRN_LOG_LEVEL", "INFO", "Log level of the broker process."),
    Variable(
        "CAIRN_COMMITLOG_FILE_SIZE",
        "1073741824",
        "CommitLog segment size in bytes (RocketMQ's 1 GiB).",
    ),
    Variable("CAIRN_CQ_FILE_ENTRIES", "300000", "Entries per ConsumeQueue file (20 bytes each)."),
    Variable("CAIRN_INDEX_HASH_SLOTS", "5000000", "Hash slots per IndexFile."),
    Variable("CAIRN_INDEX_MAX_ENTRIES", "20000000", "Entries per IndexFile before it rolls."),
    Variable("CAIRN_FLUSH_INTERVAL_MS", "500", "Async CommitLog flush period."),
    Variable("CAIRN_FLUSH_LEAST_PAGES", "4", "Dirty 4 KiB pages before an async flush writes."),
    Variable("CAIRN_FLUSH_THOROUGH_INTERVAL_MS", "10000", "Flush everything at least this often."),
    Variable("CAIRN_CQ_FLUSH_INTERVAL_MS", "1000", "ConsumeQueue flush period."),
    Variable(
        "CAIRN_FILE_RESERVED_HOURS", "72", "CommitLog files older than this are deleted by cleanup."
    ),
    Variable(
        "CAIRN_DELETE_WHEN", "04", "Hours of day (`;`-separated) when expired files are deleted."
    ),
    Variable(
        "CAIRN_DISK_MAX_USED_RATIO", "75", "Disk use (%) above which cleanup runs at any hour."
    ),
    Variable(
        "CAIRN_DISK_WARNING_RATIO",
        "90",
        "Disk use (%) above which puts are refused until cleanup frees space.",
    ),
    Variable(
        "CAIRN_DISK_CLEAN_FORCIBLY_RATIO",
        "85",
        "Disk use (%) above which forced cleanup may delete files before their time (see the next setting).",
    ),
    Variable(
        "CAIRN_DISK_CLEAN_FORCIBLY_UNCONSUMED",
        "false",
        "`true`: forced cleanup may delete CommitLog files younger than `CAIRN_FILE_RESERVED_HOURS` or holding messages a subscribed group has not consumed (RocketMQ's behaviour). `false`: it never does; puts are refused until space is freed.",
    ),
    Variable(
        "CAIRN_DELETE_FILES_BATCH_MAX", "10", "CommitLog files deleted per cleanup run at most."
    ),
    Variable("CAIRN_CLEAN_INTERVAL_MS", "10000", "Cleanup period."),
    Variable(
        "CAIRN_CLEAN_FIRST_DELAY_MS",
        "60000",
        "Delay before cleanup first deletes after start (the disk is measured at once).",
    ),
    Variable(
        "CAIRN_REPUT_MAX_BYTES", "4194304", "CommitLog bytes one reput pass dispatches at most."
    ),
    Variable(
        "CAIRN_REPUT_POLL_MS",
        "1",
        "Celery mode: how often an idle worker's reput checks for new data.",
    ),
    Variable(
        "CAIRN_REPUT_LEASE_S",
        "30",
        "Celery mode: how long one reput task holds reput before re-queueing itself.",
    ),
    Variable(
        "CAIRN_REPUT_ENSURE_S",
        "5",
        "Celery mode: beat period that restarts reput if its worker died.",
    ),
    Variable(
        "CAIRN_FOLLOW_INTERVAL_MS",
        "100",
        "Celery mode: how often the broker polls the workers' progress without a Redis event.",
    ),
    Variable(
        "CAIRN_BEAT_SCHEDULE_FILE",
        "<store>/services/celerybeat-schedule",
        "Celery beat's schedule file.",
    ),
    Variable(
        "CAIRN_INDEX_SPARK_MIN_BYTES",
        "68719476736",
        "Index rebuilds of stores this big go to the Spark builder when `pipeline` is installed.",
    ),
    Variable(
        "CAIRN_SPARK_MASTER",
        "local[*]",
        "Spark master for the data pipeline (`spark://host:7077` for a cluster).",
    ),
    Variable(
        "CAIRN_ARCHIVE_DIR",
        "$CAIRN_DATA_DIR/pipeline/archive",
        "The pipeline's message archive; key queries older than the CommitLog's oldest message read it.",
    ),
    Variable(
        "CAIRN_ARCHIVE_INTERVAL_S",
        "3600",
        "Celery mode: beat period of the pipeline's archive task `cairn.pipeline_archive` (0 turns it off).",
    ),
    Variable(
        "CAIRN_STATS_INTERVAL_S",
        "300",
        "Celery mode: beat period of the pipeline's statistics task `cairn.pipeline_stats` (0 turns it off).",
    ),
    Variable(
        "CAIRN_COMPACT_INTERVAL_S",
        "86400",
        "Celery mode: beat period of the archive compaction task `cairn.pipeline_compact` (0 turns it off).",
    ),
    Variable(
        "CAIRN_TIERED_BACKEND",
        "none",
        "Tiered storage backend: `none` (off), `posix` (a directory: another disk or a mounted object store), `s3` (an S3-compatible object store, `CAIRN_TIERED_S3_*`; needs the `s3` extra) or `memory` (tests; inline services only).",
    ),
    Variable(
        "CAIRN_TIERED_PATH", "$CAIRN_DATA_DIR/tiered", "Root directory of the `posix` tier backend."
    ),
    Variable(
        "CAIRN_TIERED_READ_STRATEGY",
        "NOT_IN_DISK",
        "When reads use the tier: `DISABLE`, `NOT_IN_DISK` (offsets no longer on local disk), `NOT_IN_MEM` (also when probably out of the page cache) or `FORCE`.",
    ),
    Variable(
        "CAIRN_TIERED_RESERVED_HOURS",
        "72",
        "Tier retention in hours (a topic's `reserve.time` attribute overrides it; 0 keeps forever).",
    ),
    Variable(
        "CAIRN_TIERED_GROUP_COMMIT_COUNT",
        "4096",
        "Upload to the tier once this many messages wait.",
    ),
    Variable("CAIRN_TIERED_GROUP_COMMIT_BYTES", "4194304", "... or once this many bytes wait."),
    Variable(
        "CAIRN_TIERED_GROUP_COMMIT_TIMEOUT_MS",
        "30000",
        "... or once the oldest waiting message was stored this long ago.",
    ),
    *(
        Variable(name, default or "(unset)", meaning)
        for name, (default, meaning) in S3_VARIABLES.items()
    ),
    Variable(
        "CAIRN_TEST_REDIS_URL",
        "(unset)",
        "Tests only: use this Redis instead of starting a private `redis-server`.",
    ),
)


def readme_table() -> str:
    """The README's settings table (markdown), one row per :data:`VARIABLES` entry.

    A default in parentheses is prose ("(the listen host)"), an empty one reads "unset", any
    other is a literal value.
    """

    def shown(default: str) -> str:
        if not default:
            return "unset"
        if default.startswith("(") and default.endswith(")"):
            return default[1:-1]
        return f"`{default}`"

    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {shown(v.default)} | {v.meaning} |" for v in VARIABLES]
    return "\n".join(rows) + "\n"


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


def get_int(name: str, default: int, minimum: int = 0) -> int:
    """An integer setting of at least ``minimum``; a clear one-line error otherwise."""
    raw = get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"{name}: expected a whole number, got {raw!r}") from None
    if value < minimum:
        raise SystemExit(f"{name}: must be at least {minimum}, got {value}")
    return value


def get_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = get(name, default).lower()
    if value not in choices:
        raise SystemExit(f"{name}: expected one of {', '.join(choices)}, got {value!r}")
    return value


def tls_files() -> tuple[Path, Path] | None:
    """``(CAIRN_TLS_CERT, CAIRN_TLS_KEY)`` as absolute paths, or None when neither is set.

    Only the settings are checked here (one without the other is an error); the files are
    read and checked when the broker starts (:mod:`cairn.tls`), so that commands which do not
    serve (``migrate``, ``createtoken``) run wherever the certificate lives.
    """
    cert, key = get("CAIRN_TLS_CERT", ""), get("CAIRN_TLS_KEY", "")
    if not cert and not key:
        return None
    if not cert or not key:
        missing = "CAIRN_TLS_KEY" if cert else "CAIRN_TLS_CERT"
        raise SystemExit(
            f"{missing}: required with {'CAIRN_TLS_CERT' if cert else 'CAIRN_TLS_KEY'} "
            "(TLS needs the certificate and its private key)"
        )
    return (BASE_DIR / cert).resolve(), (BASE_DIR / key).resolve()


def tls_ca() -> Path | None:
    """``CAIRN_TLS_CA`` as an absolute path, or None; it needs the certificate pair."""
    ca = get("CAIRN_TLS_CA", "")
    if not ca:
        return None
    if tls_files() is None:
        raise SystemExit(
            "CAIRN_TLS_CA: needs CAIRN_TLS_CERT and CAIRN_TLS_KEY (client certificates are "
            "asked for only over TLS)"
        )
    return (BASE_DIR / ca).resolve()


KAFKA_AUTH_POLICIES = ("required", "optional", "none")
ROLE_CHOICES = ("viewer", "operator", "admin", "none")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address) is reachable from this machine only."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a wildcard ("", "*") or another host name: assume reachable
        return False


def kafka_auth(host: str) -> str:
    """``CAIRN_KAFKA_AUTH`` for a Kafka listener bound to ``host``.

    Unset: ``optional`` on loopback, ``required`` elsewhere. A non-loopback listener
    refuses ``optional`` (strangers would act as the anonymous role); ``none`` passes only
    because it was said explicitly.

    Raises:
        SystemExit: an unknown value, or ``optional`` on a non-loopback address.
    """
    loopback = is_loopback(host)
    policy = get_choice(
        "CAIRN_KAFKA_AUTH", "optional" if loopback else "required", KAFKA_AUTH_POLICIES
    )
    if policy == "optional" and not loopback:
        raise SystemExit(
            f"CAIRN_KAFKA_AUTH=optional would let anyone reaching {host or '*'}:CAIRN_KAFKA_PORT "
            "act without logging in: use required (the default off loopback), or none "
            "explicitly, or bind CAIRN_KAFKA_HOST=127.0.0.1"
        )
    return policy


def kafka_anonymous_role() -> str:
    """``CAIRN_KAFKA_ANONYMOUS_ROLE``; ``""`` for ``none`` (no role)."""
    role = get_choice("CAIRN_KAFKA_ANONYMOUS_ROLE", "operator", ROLE_CHOICES)
    return "" if role == "none" else role


_DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_origin(text: str) -> tuple[str, str, int]:
    """``scheme://host[:port]`` as ``(scheme, host, port)``: lower case, IPv6 hosts without
    brackets, the scheme's default port filled in.

    Raises:
        ValueError: not an http(s) origin (a path, query, user or wildcard in it, a bad port).
    """
    try:
        parsed = urlparse(text.strip())
        port = parsed.port
    except ValueError:
        raise ValueError(f"{text!r} has a bad port") from None
    scheme = parsed.scheme.lower()
    host = (parsed.hostname or "").lower()
    if (
        scheme not in _DEFAULT_PORTS
        or not host
        or "*" in host
        or parsed.path not in ("", "/")
        or parsed.params
        or parsed.query
        or parsed.fragment
        or parsed.username is not None
    ):
        raise ValueError(f"{text!r} is not an origin (expected http(s)://host[:port], no path)")
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


def origin_text(origin: tuple[str, str, int]) -> str:
    """An origin as a browser writes it in ``Origin``: no default port, IPv6 in brackets."""
    scheme, host, port = origin
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" if port == _DEFAULT_PORTS[scheme] else f"{scheme}://{shown}:{port}"


def allowed_origins() -> tuple[tuple[str, str, int], ...]:
    """``CAIRN_ALLOWED_ORIGINS``, each parsed by :func:`parse_origin`."""
    found = []
    for part in get("CAIRN_ALLOWED_ORIGINS", "").split(","):
        if part.strip():
            try:
                found.append(parse_origin(part))
            except ValueError as exc:
                raise SystemExit(f"CAIRN_ALLOWED_ORIGINS: {exc}") from None
    return tuple(found)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def metrics_allow() -> tuple[Network, ...]:
    """``CAIRN_METRICS_ALLOW``: the networks that may scrape ``/metrics`` without a token
    (a bare address is a one-address network). Unset: none.

    Raises:
        SystemExit: an entry that is not an address or a network (host bits set included:
            ``10.0.0.1/8`` is refused rather than read as a guess).
    """
    networks = []
    for entry in get("CAIRN_METRICS_ALLOW", "").split(","):
        text = entry.strip()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text.strip("[]")))
        except ValueError as exc:
            raise SystemExit(
                f"CAIRN_METRICS_ALLOW: {text!r} is not an address or network: {exc}"
            ) from None
    return tuple(networks)


def data_dir() -> Path:
    return (BASE_DIR / get("CAIRN_DATA_DIR", "var")).resolve()


def store_dir() -> Path:
    raw = get("CAIRN_STORE_DIR", "")
    return Path(raw).resolve() if raw else data_dir() / "store"


def archive_dir() -> Path:
    """Where ``manage.py pipeline archive`` (default ``--out``) writes the archive."""
    raw = get("CAIRN_ARCHIVE_DIR", "")
    return Path(raw).resolve() if raw else data_dir() / "pipeline" / "archive"


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
