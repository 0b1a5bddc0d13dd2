"""Production settings: ``manage.py check --deploy`` passes without a warning under a production
environment, the embedded quick-start keeps plain http working, and each security option follows
its environment variable. Settings are read once per process, so every case runs in a subprocess.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECURITY_SETTINGS = (
    "DEBUG",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_PROXY_SSL_HEADER",
)
# Variables of the surrounding shell that would change what a case means.
CONFIG_VARIABLES = (
    "DEBUG",
    "OPTGATE_EMBEDDED",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "DATABASE_URL",
    "DB_CONN_MAX_AGE",
    "CELERY_BROKER_URL",
    "CACHE_URL",
    *SECURITY_SETTINGS,
)


def environment(tmp_path: Path, **variables: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in CONFIG_VARIABLES}
    env.update({"DJANGO_SETTINGS_MODULE": "optgate.settings", "OPTGATE_VAR_DIR": str(tmp_path / "var")})
    env.update(variables)
    return env


def production(tmp_path: Path, **variables: str) -> dict[str, str]:
    """DEBUG off, OPTGATE_EMBEDDED=0, a long random SECRET_KEY and a real host name; then ``variables``."""
    settings = {
        "DEBUG": "0",
        "OPTGATE_EMBEDDED": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "optgate.example.com",
    }
    return environment(tmp_path, **{**settings, **variables})


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def security_settings(env: dict[str, str]) -> dict[str, Any]:
    script = (
        "import json, django; django.setup(); from django.conf import settings; "
        f"print(json.dumps({{name: getattr(settings, name) for name in {SECURITY_SETTINGS!r}}}))"
    )
    done = run([sys.executable, "-c", script], env)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_check_deploy_passes_without_warnings_in_production(tmp_path: Path) -> None:
    done = run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], production(tmp_path))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "System check identified no issues" in output
    assert "WARNING" not in output.upper()


def test_check_deploy_flags_the_embedded_defaults(tmp_path: Path) -> None:
    # The same check fails on the quick-start settings: it is the production switch that makes it pass.
    done = run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], environment(tmp_path))
    output = done.stdout + done.stderr
    assert done.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W009", "security.W012", "security.W016"):
        assert warning in output


def test_production_switches_every_https_safety_on(tmp_path: Path) -> None:
    assert security_settings(production(tmp_path)) == {
        "DEBUG": False,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": True,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
    }


def test_the_embedded_quick_start_keeps_plain_http(tmp_path: Path) -> None:
    embedded = security_settings(environment(tmp_path))
    assert embedded["DEBUG"] is False  # `make demo` runs without DEBUG, on http://127.0.0.1
    assert not any(embedded[name] for name in SECURITY_SETTINGS)


def test_each_option_follows_its_variable(tmp_path: Path) -> None:
    tuned = security_settings(
        production(
            tmp_path,
            SECURE_SSL_REDIRECT="0",
            SECURE_HSTS_SECONDS="600",
            SECURE_HSTS_PRELOAD="off",
            SECURE_PROXY_SSL_HEADER="X-Scheme=https",
        )
    )
    assert tuned["SECURE_SSL_REDIRECT"] is False
    assert tuned["SECURE_HSTS_SECONDS"] == 600
    assert tuned["SECURE_HSTS_PRELOAD"] is False
    assert tuned["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_SCHEME", "https"]
    assert security_settings(production(tmp_path, SECURE_PROXY_SSL_HEADER="off"))["SECURE_PROXY_SSL_HEADER"] is None


def database_connection(env: dict[str, str]) -> tuple[int, bool]:
    script = (
        "import django; django.setup(); from django.conf import settings; "
        "db = settings.DATABASES['default']; print(db['CONN_MAX_AGE'], db['CONN_HEALTH_CHECKS'])"
    )
    done = run([sys.executable, "-c", script], env)
    assert done.returncode == 0, done.stderr
    age, checks = done.stdout.split()
    return int(age), checks == "True"


def test_production_keeps_database_connections_and_checks_them_before_reuse(tmp_path: Path) -> None:
    assert database_connection(production(tmp_path)) == (60, True)
    assert database_connection(production(tmp_path, DB_CONN_MAX_AGE="0")) == (0, True)
    assert database_connection(environment(tmp_path)) == (0, True)  # the quick-start's SQLite file


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"SECRET_KEY": ""}, "SECRET_KEY"),
        ({"SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto"}, "SECURE_PROXY_SSL_HEADER"),
        ({"SECURE_HSTS_SECONDS": "a year"}, "SECURE_HSTS_SECONDS"),
        ({"SESSION_COOKIE_SECURE": "maybe"}, "SESSION_COOKIE_SECURE"),
        ({"CACHE_URL": "memcached://cache:11211"}, "CACHE_URL"),
        ({"DB_CONN_MAX_AGE": "-1"}, "DB_CONN_MAX_AGE"),
    ],
)
def test_a_bad_production_value_stops_start_up_naming_it(tmp_path: Path, variables: dict[str, str], named: str) -> None:
    done = run([sys.executable, "manage.py", "check"], production(tmp_path, **variables))
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and named in done.stderr
