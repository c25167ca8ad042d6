"""Django settings. Everything configurable comes from environment variables (cairn/env.py).

Embedded defaults need no servers: SQLite, Channels' in-memory layer, in-process services.
``CAIRN_REDIS_URL`` switches the channel layer (and Celery) to Redis; ``DATABASE_URL`` switches
Django's own tables to PostgreSQL.
"""

from __future__ import annotations

from cairn import env

BASE_DIR = env.BASE_DIR
DATA_DIR = env.data_dir()
# Only the broker's user may enter it (the database, the secret key, the first password).
DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)

SECRET_KEY = env.secret_key()
DEBUG = env.get_bool("CAIRN_DEBUG", False)
ALLOWED_HOSTS = [
    h.strip()
    for h in env.get("CAIRN_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
    if h.strip()
]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "cairn",
    "server",
    "api",
    "accounts",
    "webui",
]

MIDDLEWARE = [
    # First, so that it times the whole chain (server.metrics.requests): GET /metrics.
    "server.metrics.requests.HttpMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "server.urls"
ASGI_APPLICATION = "server.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webui.context.console",
            ],
        },
    },
]

_database_url = env.get("DATABASE_URL", "")
DATABASES = {
    "default": env.database_from_url(_database_url)
    if _database_url
    else {"ENGINE": "django.db.backends.sqlite3", "NAME": DATA_DIR / "cairn.sqlite3"}
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # SQLite's default rollback journal fsyncs several times per commit: an audit row per
    # send cost milliseconds. WAL with synchronous=NORMAL commits without an fsync (the WAL is
    # synced at checkpoints), survives a crash of the process, and lets readers (the console,
    # Celery workers) run while a request writes. A power cut may lose the last commits.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "init_command", "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL"
    )
    # Keep each request thread's connection between requests instead of opening (and
    # setting up) one per request. Request threads are reused and few (cairn.handler), so
    # the connections are too; Django still closes one that errored or outlived this.
    DATABASES["default"].setdefault("CONN_MAX_AGE", 600)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
# The console's own login page (webui); the API answers 401 instead of redirecting.
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

REDIS_URL = env.get("CAIRN_REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # A live trace follows whole topics: room for bursts between two reads.
            "CONFIG": {"hosts": [REDIS_URL], "capacity": 1000},
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 1000}}
    }

# Token first: its ``WWW-Authenticate: Token`` header turns "not logged in" into a 401 (with
# Session first DRF answers 403). Session logins still work for the console. Tokens are
# DRF's, checked with one query per request (api.authentication).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.authentication.QuickTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.LimitedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.exceptions.problem_exception_handler",
    # ``?format=`` is the config documents' own parameter (rocketmq | json), not DRF's
    # renderer override (the API renders JSON only).
    "URL_FORMAT_OVERRIDE": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Cairn REST API",
    "DESCRIPTION": (
        "Topics, subscription groups, offsets, messages and RocketMQ config documents of one "
        "Cairn broker. Times are epoch milliseconds. Errors are application/problem+json."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "BodyEncodingInEnum": ["text", "base64", "json"],
        "BodyEncodingOutEnum": ["text", "base64"],
        "BodyEncodingQueryEnum": ["auto", "base64"],
    },
}

# REST API limits (see README "REST API").
CAIRN_API = {
    # Largest request body; more is refused with 413 before it is parsed. A batch may carry
    # 4 MiB of bodies (BrokerConfig.max_batch_bytes), which base64 and JSON escaping inflate.
    "MAX_REQUEST_BYTES": 16 * 1024 * 1024,
    # Longest long poll a pull may ask for (wait_ms); longer values are refused with 400.
    "MAX_WAIT_MS": 30_000,
    # Most messages in one send request, and in one page of a pull, browse or key query.
    "MAX_BATCH_MESSAGES": 1_000,
    "MAX_PAGE_MESSAGES": 1_000,
}

# Console form posts take what REST takes: a message body up to maxMessageSize (4 MiB),
# which a form's percent-encoding inflates up to three times. Django's default (2.5 MiB)
# ended a console send of a 2.5 MiB body on a bare "Bad Request (400)" page.
DATA_UPLOAD_MAX_MEMORY_SIZE = CAIRN_API["MAX_REQUEST_BYTES"]

# The broker runtime (store, services, Kafka listener) reads these.
CAIRN = {
    "STORE_DIR": env.store_dir(),
    "HTTP_HOST": env.get("CAIRN_HTTP_HOST", "127.0.0.1"),
    "HTTP_PORT": env.get_port("CAIRN_HTTP_PORT", 8080),
    "KAFKA_PORT": env.get_port("CAIRN_KAFKA_PORT", 9092),
    "SERVICES": env.get_choice("CAIRN_SERVICES", "inline", ("inline", "celery")),
    "FLUSH": env.get_choice("CAIRN_FLUSH", "async", ("async", "sync")),
    "AUTO_CREATE_TOPICS": env.get_bool("CAIRN_AUTO_CREATE_TOPICS", False),
    # The data pipeline's Parquet archive: key queries older than the CommitLog read it.
    "ARCHIVE_DIR": env.archive_dir(),
}

# -- The HTTP listener's security (README "Serving over HTTPS"; issue 18) ------------------
# CAIRN_TLS_CERT / CAIRN_TLS_KEY: runbroker serves HTTPS and WSS on the HTTP port (cairn.tls).
# The files are checked when the broker starts; here only whether TLS is on matters.
CAIRN_TLS_FILES = env.tls_files()
CAIRN_HTTPS = CAIRN_TLS_FILES is not None
# Cookies go over TLS only when the broker speaks it. There is no reverse-proxy mode
# (SECURE_PROXY_SSL_HEADER stays unset): a proxy that terminates TLS lists its public origin in
# CAIRN_ALLOWED_ORIGINS, and the cookies between it and the broker are not marked Secure.
SESSION_COOKIE_SECURE = CAIRN_HTTPS
CSRF_COOKIE_SECURE = CAIRN_HTTPS
# Sent by SecurityMiddleware on HTTPS responses only (never over plain HTTP, where it means
# nothing and a browser ignores it).
SECURE_HSTS_SECONDS = env.get_int("CAIRN_HSTS_SECONDS", 31_536_000) if CAIRN_HTTPS else 0
# Pages of these origins may post the console's forms (CSRF) and open the live-trace
# WebSocket (webui.origin), besides the broker's own origin.
CAIRN_ALLOWED_ORIGINS = env.allowed_origins()
CSRF_TRUSTED_ORIGINS = [env.origin_text(origin) for origin in CAIRN_ALLOWED_ORIGINS]
# Every response gets a Content-Security-Policy: scripts, styles, images, fonts and
# connections (fetch, the live-trace WebSocket) from the broker's own origin only; no inline
# script or style (the console keeps its JavaScript and CSS in webui/static), no plugins, no
# <base>, forms post here only, and no page may frame the console (clickjacking).
MIDDLEWARE = [*MIDDLEWARE, "django.middleware.csp.ContentSecurityPolicyMiddleware"]
SECURE_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'"],
    "font-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}

# -- GET /metrics (README "Prometheus metrics"; server.metrics) ------------------------------
# Addresses that may scrape without a token; empty: every scrape authenticates.
CAIRN_METRICS_ALLOW = env.metrics_allow()

# -- Accounts (README "Security"): failed logins, lockout, SCRAM --------------------------
CAIRN_ACCOUNTS = {
    "THROTTLE_AFTER": env.get_int("CAIRN_LOGIN_THROTTLE_AFTER", 5),
    "THROTTLE_MAX_SECONDS": 60,
    "LOCKOUT_AFTER": env.get_int("CAIRN_LOGIN_LOCKOUT_AFTER", 10),
    "LOCKOUT_SECONDS": env.get_int("CAIRN_LOGIN_LOCKOUT_SECONDS", 900),
    "ADDRESS_MAX_FAILURES": env.get_int("CAIRN_LOGIN_ADDRESS_MAX_FAILURES", 50),
    "ADDRESS_WINDOW_SECONDS": env.get_int("CAIRN_LOGIN_ADDRESS_WINDOW_SECONDS", 300, 1),
    "SCRAM_ITERATIONS": env.get_int("CAIRN_SCRAM_ITERATIONS", 8192, 4096),
    # A token's "last used" time is written at most this often (a send does not pay a write).
    "TOKEN_LAST_USE_SECONDS": 60,
}
# Not a rule on passwords: Django calls every validator's password_changed() with the new
# password whenever one is saved (set_password + save: REST, console, createsuperuser,
# changepassword), which is where the password's SCRAM credentials are derived.
AUTH_PASSWORD_VALIDATORS = [{"NAME": "accounts.passwords.DeriveScramKeys"}]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.get("CAIRN_LOG_LEVEL", "INFO").upper()},
    "loggers": {"daphne": {"level": "WARNING"}, "django.channels.server": {"level": "WARNING"}},
}
