"""OptGate settings: one module, driven by the environment.

Defaults are the embedded quick-start (SQLite file, a broker that needs no server, vLLM on the
CPU with the project's tiny model kit). Production switches to PostgreSQL and Redis by setting
``DATABASE_URL`` and ``CELERY_BROKER_URL``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from core.env import env_bool, env_int, env_json_object, env_list, env_paths, env_rate, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("OPTGATE_VAR_DIR", str(BASE_DIR / "var")) or BASE_DIR / "var")

DEBUG = env_bool("DEBUG", False)
# The embedded quick-start serves plain http on a laptop; production sets OPTGATE_EMBEDDED=0, and
# with DEBUG off that switches on every production safety below (each can still be overridden).
OPTGATE_EMBEDDED = env_bool("OPTGATE_EMBEDDED", True)
PRODUCTION = not DEBUG and not OPTGATE_EMBEDDED
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured("SECRET_KEY is required when DEBUG is off")
    # The embedded quick-start runs on a laptop; production sets OPTGATE_EMBEDDED=0.
    # Django's "django-insecure-" prefix makes `check --deploy` flag it wherever it is used.
    SECRET_KEY = "django-insecure-embedded-key-set-SECRET_KEY-in-production"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "core",
    "ledger",
    "accounts",
    "backends",
    "evaluators",
    "gates",
    "workers",
    "tools",
    "django_celery_beat",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # The UI's answer to a service's NotAllowed (403) and DomainError (409): the refusal page.
    "gates.views.errors.ServiceRefusalMiddleware",
]

ROOT_URLCONF = "optgate.urls"
WSGI_APPLICATION = "optgate.wsgi.application"
ASGI_APPLICATION = "optgate.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL is None:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASE_URL = f"sqlite:///{VAR_DIR / 'optgate.sqlite3'}"
# Production web processes keep their database connections (checked before each request reuses
# one): a new connection per request costs a PostgreSQL backend process and cut the API's
# throughput by a fifth in docs/benchmarks.md. DB_CONN_MAX_AGE=0 closes them after each request.
DB_CONN_MAX_AGE = env_int("DB_CONN_MAX_AGE", 60 if PRODUCTION else 0, minimum=0)
try:
    DATABASES = {
        "default": dj_database_url.parse(DATABASE_URL or "", conn_max_age=DB_CONN_MAX_AGE, conn_health_checks=True)
    }
except Exception as exc:  # dj-database-url raises several types for a bad URL
    raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, worker) share the file in the embedded setup.
    DATABASES["default"].setdefault("OPTIONS", {}).update({"timeout": 30, "transaction_mode": "IMMEDIATE"})
DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME")} if env_str("TEST_DATABASE_NAME") else {}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Rate-limit counters live in the cache: one process in the embedded setup; several web processes
# need a shared cache (CACHE_URL=redis://host:6379/1) or each counts on its own.
CACHE_URL = env_str("CACHE_URL", "locmem://") or "locmem://"
if CACHE_URL.startswith(("redis://", "rediss://")):
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}}
elif CACHE_URL == "locmem://":
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
else:
    raise ImproperlyConfigured("CACHE_URL must be locmem:// or a redis:// / rediss:// URL")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"

# Requests allowed per client ("N/s|min|hour|day", or "off"): anonymous requests per address,
# writes per user, token create/rotate per user, web sign-in attempts per address and per username.
OPTGATE_RATE_LIMITS = {
    "anon": env_rate("OPTGATE_RATE_ANON", "120/min"),
    "write": env_rate("OPTGATE_RATE_WRITE", "300/min"),
    "token": env_rate("OPTGATE_RATE_TOKEN", "10/hour"),
    "login_ip": env_rate("OPTGATE_RATE_LOGIN_IP", "30/min"),
    "login_username": env_rate("OPTGATE_RATE_LOGIN_USERNAME", "10/min"),
    "ledger_verify": env_rate("OPTGATE_RATE_LEDGER_VERIFY", "6/min"),
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["core.throttling.AnonThrottle", "core.throttling.UserWriteThrottle"],
    # Reverse proxies in front of the web processes: throttles then count the client address from
    # X-Forwarded-For. 0 trusts only the socket address, so clients cannot spoof that header.
    "NUM_PROXIES": env_int("OPTGATE_NUM_PROXIES", 0, minimum=0),
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # A JSON parser that answers 400 to bodies nested past Python's recursion limit.
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "core.api.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "OptGate API",
    "DESCRIPTION": "Release gate and governance for LLM inference optimizations.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Benefit and guardrail metrics share one choice set; name it once.
    "ENUM_NAME_OVERRIDES": {
        "MetricEnum": "gates.vocabulary.METRIC_CHOICES",
        "TicketStatusEnum": "gates.models.TicketStatus",
        "CanaryOutcomeEnum": "gates.canary.contract.OUTCOMES",
        "ReviewOutcomeEnum": "gates.models.ReviewOutcome",
        "DecisionOutcomeEnum": "gates.models.DecisionOutcome",
    },
}

# Celery. The embedded default is kombu's SQLAlchemy transport on a SQLite file: no server.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", f"sqla+sqlite:///{VAR_DIR / 'broker.sqlite3'}")
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Queues: ``gpu`` carries evaluations (one worker per GPU, concurrency 1), ``default`` the rest.
CELERY_TASK_QUEUES: dict[str, dict[str, str]] = {"default": {}, "gpu": {}}
CELERY_TASK_ROUTES = {"optgate.evaluate_run": {"queue": "gpu"}}
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT_S", 300, minimum=10)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT_S", 360, minimum=10)
# An unacknowledged message comes back after this long (Redis); longer than the longest evaluation.
# The embedded SQLAlchemy transport passes its options to create_engine, which refuses this one.
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT_S", 7200, minimum=10)}
    if not (CELERY_BROKER_URL or "").startswith("sqla+")
    else {}
)
# Publishing while the broker is down fails fast; the sweeper re-sends from the database later.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TIMEZONE = "UTC"

# Engine launches: a model path must lie under one of these roots (no traversal, no symlink escape).
OPTGATE_KIT_DIR = Path(env_str("OPTGATE_KIT_DIR", str(Path.home() / ".cache" / "optgate" / "kit")) or "")
# The tiny model kit committed with the repository (see tools/kit/ship.py).
OPTGATE_SHIPPED_KIT_DIR = BASE_DIR / "kit"
OPTGATE_MODEL_ROOTS = env_paths("OPTGATE_MODEL_ROOTS", [OPTGATE_SHIPPED_KIT_DIR, OPTGATE_KIT_DIR])
# Registration also runs vLLM's own argument parser (in a subprocess) when vLLM is installed.
_vllm_check = (env_str("OPTGATE_VALIDATE_WITH_VLLM", "auto") or "auto").lower()
if _vllm_check not in {"auto", "on", "off"}:
    raise ImproperlyConfigured(f"OPTGATE_VALIDATE_WITH_VLLM={_vllm_check!r} must be auto, on or off")
OPTGATE_VALIDATE_WITH_VLLM = _vllm_check == "on" or (
    _vllm_check == "auto" and importlib.util.find_spec("vllm") is not None
)
OPTGATE_ARTIFACTS_DIR = Path(env_str("OPTGATE_ARTIFACTS_DIR", str(VAR_DIR / "artifacts")) or "")
OPTGATE_ENGINE_DEVICE = env_str("OPTGATE_ENGINE_DEVICE", "cpu") or "cpu"
if OPTGATE_ENGINE_DEVICE not in {"cpu", "gpu"}:
    raise ImproperlyConfigured(f"OPTGATE_ENGINE_DEVICE={OPTGATE_ENGINE_DEVICE!r} must be cpu or gpu")
OPTGATE_ENGINE_STARTUP_TIMEOUT_S = env_int("OPTGATE_ENGINE_STARTUP_TIMEOUT_S", 900, minimum=10)
OPTGATE_RUN_TIMEOUT_S = env_int("OPTGATE_RUN_TIMEOUT_S", 3600, minimum=60)
# A worker keeps the engine of its last run up this long for the next run launched the same way
# (evaluators.warm: consecutive tickets usually share their baseline); 0 stops every engine after its run.
OPTGATE_WARM_ENGINE_IDLE_S = env_int("OPTGATE_WARM_ENGINE_IDLE_S", 600, minimum=0)
OPTGATE_HARDWARE_CLASS = env_str("OPTGATE_HARDWARE_CLASS", "cpu-generic") or "cpu-generic"

# Integrations: GitHub deployment protection rules (HMAC secret; callback delivery off by default)
# and an optional bearer token for Prometheus scrapes of /metrics.
OPTGATE_GITHUB_WEBHOOK_SECRET = env_str("OPTGATE_GITHUB_WEBHOOK_SECRET", "") or ""
OPTGATE_GITHUB_CALLBACK = env_bool("OPTGATE_GITHUB_CALLBACK", False)
OPTGATE_METRICS_TOKEN = env_str("OPTGATE_METRICS_TOKEN", "") or ""

# Anchoring the ledger (docs/ledger.md): checkpoints of the chain head signed with an Ed25519 key
# that lives outside the database (a PEM file, or base64 of its seed in the environment), appended
# as JSON lines to a directory outside it; verification trusts these public keys (base64, comma
# separated: the current and every retired key whose checkpoints are kept).
OPTGATE_LEDGER_SIGNING_KEY_FILE = env_str("OPTGATE_LEDGER_SIGNING_KEY_FILE", "") or ""
OPTGATE_LEDGER_SIGNING_KEY = env_str("OPTGATE_LEDGER_SIGNING_KEY", "") or ""
OPTGATE_LEDGER_CHECKPOINT_DIR = env_str("OPTGATE_LEDGER_CHECKPOINT_DIR", "") or ""
OPTGATE_LEDGER_TRUSTED_KEYS = env_list("OPTGATE_LEDGER_TRUSTED_KEYS", [])

# The gate: which policy judges (YAML under gates/policies/), which reviewer capacities each risk
# tier needs (checked where it is used: gates.services.signoff), and the URL template of exported routes.
OPTGATE_GATE_POLICY = env_str("OPTGATE_GATE_POLICY", "default") or "default"
OPTGATE_SIGNOFF_CAPACITIES = env_json_object(
    "OPTGATE_SIGNOFF_CAPACITIES",
    {"low": ["platform"], "medium": ["platform"], "high": ["platform", "business_owner"]},
)
OPTGATE_ROUTE_API_BASE = env_str("OPTGATE_ROUTE_API_BASE", "http://{backend}:8000/v1") or ""
if "{backend}" not in OPTGATE_ROUTE_API_BASE or not OPTGATE_ROUTE_API_BASE.startswith(("http://", "https://")):
    raise ImproperlyConfigured("OPTGATE_ROUTE_API_BASE must be an http(s) URL template containing {backend}")

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "optgate@localhost")

# Workers: orchestration, schedules and notifications.
OPTGATE_LOAD_PROFILE = env_json_object("OPTGATE_LOAD_PROFILE", {})
# Measure a ticket's baseline and candidate together on one worker, in alternating load blocks
# (evaluators.interleave); off: two runs one after the other, the baseline's reusable.
OPTGATE_INTERLEAVED = env_bool("OPTGATE_INTERLEAVED", True)
OPTGATE_RUN_MAX_ATTEMPTS = env_int("OPTGATE_RUN_MAX_ATTEMPTS", 3, minimum=1)
OPTGATE_REVIEW_INTERVAL_DAYS = env_int("OPTGATE_REVIEW_INTERVAL_DAYS", 91, minimum=1)
OPTGATE_REVIEW_REMINDER_HOURS = env_int("OPTGATE_REVIEW_REMINDER_HOURS", 72, minimum=1)
OPTGATE_REVIEW_DUE_DAYS = env_int("OPTGATE_REVIEW_DUE_DAYS", 14, minimum=1)
OPTGATE_APPROVAL_TTL_DAYS = env_int("OPTGATE_APPROVAL_TTL_DAYS", 30, minimum=1)
# Risk tiers whose tickets are promoted automatically at the end of the observation window.
OPTGATE_AUTO_PROMOTE_RISK_TIERS = env_list("OPTGATE_AUTO_PROMOTE_RISK_TIERS", [])
if set(OPTGATE_AUTO_PROMOTE_RISK_TIERS) - {"low", "medium", "high"}:
    raise ImproperlyConfigured("OPTGATE_AUTO_PROMOTE_RISK_TIERS takes low, medium and/or high")
# Canary analysis rounds query this Prometheus (its HTTP API; docs/canary.md). Unset: no rounds run.
OPTGATE_PROMETHEUS_URL = (env_str("OPTGATE_PROMETHEUS_URL", "") or "").rstrip("/")
if OPTGATE_PROMETHEUS_URL and not OPTGATE_PROMETHEUS_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured("OPTGATE_PROMETHEUS_URL must be an http(s) URL")
OPTGATE_PROMETHEUS_TIMEOUT_S = env_int("OPTGATE_PROMETHEUS_TIMEOUT_S", 10, minimum=1)
OPTGATE_NOTIFY_WEBHOOK_URL = env_str("OPTGATE_NOTIFY_WEBHOOK_URL", "") or ""
if OPTGATE_NOTIFY_WEBHOOK_URL and not OPTGATE_NOTIFY_WEBHOOK_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured("OPTGATE_NOTIFY_WEBHOOK_URL must be an http(s) URL")
OPTGATE_NOTIFY_MAX_ATTEMPTS = env_int("OPTGATE_NOTIFY_MAX_ATTEMPTS", 5, minimum=1)
OPTGATE_NOTIFY_TIMEOUT_S = env_int("OPTGATE_NOTIFY_TIMEOUT_S", 10, minimum=1)

# Every handler redacts secrets (keys, passwords in URLs, Authorization headers, secret settings)
# before a record is written; see core/log_redaction.py. Django's own default handlers are
# replaced: its request lines (django.server) may carry keys in query strings, and its admin
# e-mails would carry request headers.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact_secrets": {"()": "core.log_redaction.RedactSecretsFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "django.server": {
            "()": "django.utils.log.ServerFormatter",
            "format": "[{server_time}] {message}",
            "style": "{",
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact_secrets"]},
        "django.server": {
            "class": "logging.StreamHandler",
            "formatter": "django.server",
            "filters": ["redact_secrets"],
        },
    },
    "loggers": {
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        "django.server": {"handlers": ["django.server"], "level": "INFO", "propagate": False},
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# HTTPS: on in production (see PRODUCTION above), off for the embedded quick-start on http://127.0.0.1.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", PRODUCTION)
# Load-balancer health probes often speak plain http inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if PRODUCTION else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", PRODUCTION)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", PRODUCTION)
# The header a TLS-terminating proxy sets, as "Header-Name=value"; "off" when nothing proxies.
# Trusting it without such a proxy would let any client claim https.
_proxy_header = (
    env_str("SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto=https" if PRODUCTION else "off") or "off"
).strip()
if _proxy_header.lower() == "off":
    SECURE_PROXY_SSL_HEADER = None
elif "=" in _proxy_header and all(part.strip() for part in _proxy_header.split("=", 1)):
    _name, _value = (part.strip() for part in _proxy_header.split("=", 1))
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _name.upper().replace("-", "_"), _value)
else:
    raise ImproperlyConfigured(f"SECURE_PROXY_SSL_HEADER={_proxy_header!r} must be Header-Name=value or off")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
